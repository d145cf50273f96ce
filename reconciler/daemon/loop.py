"""The reconcile loop: pick the newest valid commit, plan it against the live cluster, apply or report."""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from reconciler.checks import store as check_store
from reconciler.common import clock
from reconciler.daemon import notify
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.leadership import MirroredJournal, fenced, mirror, take_over
from reconciler.daemon.logs import redact_url_credentials
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.notify import Message, Notifier
from reconciler.daemon.rollouts import outcome_of, rolled_back_record
from reconciler.daemon.sessions import Sessions
from reconciler.daemon.status_page import DRAINED_KEY
from reconciler.daemon.store import PENDING_FOLLOWUPS, Store
from reconciler.daemon.watched import content_hash
from reconciler.daemon.workers import Background, Gate
from reconciler.desired.agesecrets import has_encrypted, load_identities, require_identity, unlock
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import DesiredStateError, LoadedState, load_dir
from reconciler.drivers import all_drivers
from reconciler.engine.apply import ApplyOptions, ApplyResult
from reconciler.engine.followups import FollowUp
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import carry_over
from reconciler.engine.run import Reconcile, open_reconcile
from reconciler.facts.models import ClusterFacts, SlurmNodeFact
from reconciler.ha.lease import LeaseError
from reconciler.ha.role import HighAvailability
from reconciler.model import DesiredState, SSHDefaults, parse_duration
from reconciler.rollout.runner import RolloutResult, RolloutRunner
from reconciler.transport.base import Transport


@dataclass
class Target:
    """What a cycle reconciles: a commit (or local content hash) and its loaded desired state."""

    commit: str
    subject: str | None
    loaded: LoadedState


@dataclass
class LoopState:
    """What the loop remembers between cycles (mirrored into the store)."""

    seen_head: str | None = None
    good: str | None = None
    applied: str | None = None
    last_reconcile: float | None = None  # time.monotonic() when the last run ended (None: none yet)
    failures: int = 0
    retry_at: float = 0.0  # time.monotonic() of the next retry (0: none)
    failed_commit: str | None = None
    ran_checks_for: set[str] = field(default_factory=set)
    skipped: str | None = None  # a rolled-back commit already reported as skipped


class Reconciler:
    """One daemon's reconcile logic; `cycle()` is called by the process loop."""

    def __init__(self, config: DaemonConfig, store: Store, metrics: Metrics, stop: Any,
                 config_dir: Path | None = None) -> None:
        self.config, self.store, self.metrics, self.stop = config, store, metrics, stop
        self.config_dir = config_dir or Path.cwd()
        self.log = structlog.get_logger("reconciler")
        self.source = (GitSource(config.repository, config.state_path / "repo", config.signing)
                       if config.repository else None)
        self.state = LoopState(good=store.get("good_commit"), applied=store.get("applied_commit"),
                               seen_head=store.get("seen_head"))
        self.last_state: DesiredState | None = None
        self.applied_target: Target | None = None  # the applied commit's desired state, what a rollback returns to
        self.check_target: LoadedState | None = None  # what the check worker checks: the last reconciled state
        self.check_attempts: dict[str, datetime] = {}
        self.check_clock: dict[str, float] = {}  # check -> time.monotonic() when this process last started it
        self.last_pr_report: float | None = None  # time.monotonic()
        self.forge: Any = None
        # SSH sessions: fresh per cycle unless the daemon gives persistent ones; workers: None in --once mode
        # (checks and PR reports then run inline after the cycle, as the one-shot always did).
        self.sessions = Sessions(0)
        self.gate = Gate()
        self.background: Background | None = None
        self._connects_seen = 0
        self.notifier = Notifier(config.notifications, self.config_dir) if config.notifications else None
        # The identity that decrypts the desired state's .age files (read once: `run` checked it can be read).
        self.age_identity = str(self.config_dir / config.age_identity) if config.age_identity else None
        self.age_identities = load_identities(self.age_identity) if self.age_identity else None
        # Two login nodes (config `ha:`): the role, the desired state the lease thread reaches the lease node with,
        # and the term whose takeover was done (reconciler/daemon/leadership.py). None: a single daemon.
        self.ha: HighAvailability | None = None
        self.ha_loaded: LoadedState | None = None
        self._acted_epoch: int | None = None
        self._source_failing_since: float | None = None  # first of the current run of failed fetches
        self._source_down_sent = False
        head = store.get("head_status") or {}
        metrics.source_ok.set(1 if head.get("status") == "valid" else 0)  # a restart keeps the last verdict
        with contextlib.suppress(sqlite3.Error):  # a restart keeps the GPU faults of the latest results too
            metrics.set_gpu_faults(check_store.latest(store.conn))

    # ------------------------------------------------------------ role (one daemon, or one of a pair)

    def acts(self) -> bool:
        """Whether this daemon may change the cluster: a single daemon always, one of a pair while it leads."""
        return self.ha is None or self.ha.is_leader()

    @property
    def mode(self) -> str:
        """The configured mode while acting; `report` on a standby."""
        return self.config.mode if self.acts() else "report"

    def takeover_due(self) -> bool:
        """Whether this daemon became the leader and has not taken over yet (the loop runs a cycle at once)."""
        return self.ha is not None and self.ha.is_leader() and self.ha.epoch != self._acted_epoch

    def _leadership(self, target: Target) -> bool:
        """Renew or take the lease (first cycle), take over when newly leader; True when a takeover happened."""
        assert self.ha is not None
        self.ha_loaded = target.loaded
        if not self.ha.started:
            self.ha.tick()
            self.ha.start(self.stop)
        if not self.takeover_due():
            return False
        epoch = self.ha.epoch
        try:
            take_over(self, self.ha)
        except LeaseError as exc:  # without the predecessor's journal it is not safe to act: let the term go
            self.log.error("ha.takeover_failed", error=str(exc), epoch=epoch)
            self.ha.step_down(f"could not read the crash journal: {exc}")
            return False
        self._acted_epoch = epoch
        return True

    # ------------------------------------------------------------ what to reconcile

    def due(self, now: float) -> bool:
        """True when the drift interval or a retry says a reconcile is due without a new commit (NOW: monotonic).

        Intervals are measured on time.monotonic(), never on the wall clock: a clock set back or forward (NTP
        stepping it, an admin) neither stops drift checks for the length of the jump nor fires them at once.
        Health checks and PR reports have their own schedule in the workers (reconciler/daemon/workers.py).
        """
        if self.state.retry_at and now >= self.state.retry_at:
            return True
        last = self.state.last_reconcile
        return last is None or now - last >= self.config.seconds("drift_interval")

    def _prs_due(self, now: float) -> bool:
        forge = self.config.forge
        last = self.last_pr_report
        return bool(forge and self.source and (last is None or now - last >= parse_duration(forge.interval)))

    def next_wake(self, now: float) -> float:
        """Seconds until the next drift check or retry (NOW: time.monotonic())."""
        last = self.state.last_reconcile
        times = [now if last is None else last + self.config.seconds("drift_interval")]
        if self.state.retry_at:
            times.append(self.state.retry_at)
        return max(0.0, min(times) - now)

    def due_checks(self, store: Store | None = None) -> list[str]:
        """Health checks of the last reconciled state whose interval or schedule has come."""
        if self.last_state is None or not (self.last_state.checks.node or self.last_state.checks.nccl):
            return []
        from reconciler.checks import store as check_store
        from reconciler.checks.schedule import due_checks

        last = check_store.last_started((store or self.store).conn)
        for name, when in self.check_attempts.items():  # a check that recorded nothing is not retried at once
            last[name] = max(last.get(name, when), when)
        now = time.monotonic()  # intervals since this process started a check: immune to wall-clock jumps
        ago = {name: now - started for name, started in self.check_clock.items()}
        return due_checks(self.last_state, last, clock.utcnow(), ago)

    def _resolve_git(self) -> tuple[Target | None, bool]:
        """Fetch, validate a new head; return the target (newest good commit) and whether it is new."""
        assert self.source is not None
        fetched = self.source.fetch()
        if fetched.error:
            self.log.warning("source.fetch_failed", error=fetched.error, keeping=self.state.good)
            self.store.set("source_error", {"error": fetched.error, "at": clock.wall()})
        else:
            self.store.set("source_error", None)
        self._watch_source(fetched.error)
        head = fetched.head
        if head is None:
            return None, False
        self.metrics.set_commit(self.metrics.head_commit, head, self.source.subject(head))
        good_before = self.state.good
        if head != self.state.seen_head:
            self._consider(head)
        new = self.state.good != good_before  # a new head that fails validation changes nothing
        if self.state.good is None:
            return None, new
        directory = self.source.checkout(self.state.good)
        return self._load_target(self.state.good, self.source.subject(self.state.good), directory), new

    def _consider(self, head: str) -> None:
        """Verify and validate a new branch head; it becomes the good commit only when both pass."""
        assert self.source is not None
        self.state.seen_head = head
        self.store.set("seen_head", head)
        subject = self.source.subject(head)
        run_id = _run_id()
        unsigned = self.source.verify(head)
        if unsigned:
            self.store.start_run(run_id, "commit", self.config.mode, head, subject)
            self.store.finish_run(run_id, "unverified", error=unsigned)
            self.store.set("head_status", {"commit": head, "status": "unverified", "errors": [unsigned]})
            self.metrics.source_ok.set(0)
            self.metrics.runs.labels(outcome="unverified").inc()
            self.log.error("commit.unverified", commit=head, error=unsigned, keeping=self.state.good)
            self._notify(lambda: notify.invalid_commit_message(head, [unsigned], subject, why="unverified"))
            return
        directory = self.source.checkout(head)
        try:
            self._load(directory, commit=head)
        except DesiredStateError as exc:
            errors = [str(e) for e in exc.errors]
            self.store.start_run(run_id, "commit", self.config.mode, head, subject)
            self.store.finish_run(run_id, "invalid", error="\n".join(errors))
            self.store.set("head_status", {"commit": head, "status": "invalid", "errors": errors})
            self.metrics.source_ok.set(0)
            self.metrics.runs.labels(outcome="invalid").inc()
            self.log.error("commit.invalid", commit=head, errors=errors, keeping=self.state.good)
            self._notify(lambda: notify.invalid_commit_message(head, errors, subject))
            return
        self.store.set("head_status", {"commit": head, "status": "valid", "errors": []})
        self.metrics.source_ok.set(1)
        self.state.good = head
        self.store.set("good_commit", head)
        self.log.info("commit.valid", commit=head, subject=subject)

    def _resolve_local(self, directory: Path) -> tuple[Target | None, bool]:
        """Local mode: the content of the directory's files (watched.state_files) is the 'commit'."""
        digest = content_hash(directory, (self.config.state_path.resolve(),))
        new = digest != self.state.seen_head
        if new:
            self.state.seen_head = digest
            self.store.set("seen_head", digest)
            try:
                self._load(directory)
            except DesiredStateError as exc:
                errors = [str(e) for e in exc.errors]
                run_id = _run_id()
                self.store.start_run(run_id, "watch", self.config.mode, digest, None)
                self.store.finish_run(run_id, "invalid", error="\n".join(errors))
                self.store.set("head_status", {"commit": digest, "status": "invalid", "errors": errors})
                self.metrics.source_ok.set(0)
                self.log.error("local.invalid", commit=digest, errors=errors)
                self._notify(lambda: notify.invalid_commit_message(digest, errors))
                return None, new
            self.store.set("head_status", {"commit": digest, "status": "valid", "errors": []})
            self.metrics.source_ok.set(1)
            self.state.good = digest
            self.store.set("good_commit", digest)
        if self.state.good != digest:
            return None, new
        return self._load_target(digest, None, directory), new

    def _load(self, directory: Path, commit: str | None = None) -> LoadedState:
        """Load a desired state and decrypt its .age files with `age_identity` (DesiredStateError, with file:line,
        for a wrong key, a damaged file, or no identity configured: the commit is then invalid, nothing applied)."""
        loaded = load_dir(directory, commit=commit)
        if has_encrypted(loaded.state):
            if self.age_identity is None or self.age_identities is None:
                require_identity(loaded)
            else:
                unlock(loaded, self.age_identities, self.age_identity)
        return loaded

    def _load_target(self, commit: str, subject: str | None, directory: Path) -> Target | None:
        try:
            loaded = self._load(directory, commit=None if commit.startswith("local:") else commit)
        except DesiredStateError as exc:  # the good commit no longer loads (e.g. a file outside Git changed)
            self.log.error("target.invalid", commit=commit, errors=[str(e) for e in exc.errors])
            return None
        loaded.state = self._with_ssh_overrides(loaded.state)
        return Target(commit=commit, subject=subject, loaded=loaded)

    def _with_ssh_overrides(self, state: Any) -> Any:
        overrides = self.config.ssh.model_dump(exclude_none=True)
        if not overrides:
            return state
        for key in ("config", "known_hosts", "identity_file"):
            if key in overrides:
                overrides[key] = str((self.config_dir / overrides[key]).resolve())
        ssh = SSHDefaults.model_validate({**state.ssh.model_dump(), **overrides})
        return state.model_copy(update={"ssh": ssh})

    # ------------------------------------------------------------ one cycle

    def cycle(self, trigger: str, force: bool = False) -> str | None:
        """Resolve the target and reconcile it when new, due or forced; return the run's outcome (or None)."""
        self.metrics.drift_interval.set(self.config.seconds("drift_interval"))
        if self.source is not None:
            target, new = self._resolve_git()
        else:
            assert self.config.watch is not None
            target, new = self._resolve_local(Path(self.config.watch))
        if target is None:
            self.log.warning("cycle.no_target", reason="no valid desired state yet")
            return None
        if self.ha is not None and self._leadership(target):
            force, trigger = True, "takeover"
        journal = MirroredJournal(self.store, self.ha).load()
        if journal is not None and self.mode == "enforce":
            return self.recover(journal)
        rolled_back = self.store.rolled_back()
        if target.commit in rolled_back:
            if self.state.skipped != target.commit:
                self.log.warning("commit.rolled_back_skipped", commit=target.commit, keeping=self.state.applied,
                                 gate=rolled_back[target.commit].get("gate"))
                self.state.skipped = target.commit
            target = self._target_of(self.state.applied) if self.state.applied else None
            if target is None:
                return None
        now = time.monotonic()
        pending = target.commit != self.state.applied
        if not (force or new or pending and not self.state.retry_at or self.due(now)):
            return None
        if self.state.retry_at and now < self.state.retry_at and target.commit == self.state.failed_commit \
                and not (force or new):
            return None
        return self.reconcile(target, trigger)

    def reconcile(self, target: Target, trigger: str) -> str:
        """Gather, plan, and apply (enforce) or report (report mode); record everything."""
        run_id = _run_id()
        log = self.log.bind(run_id=run_id, commit=target.commit[:12])
        structlog.contextvars.bind_contextvars(run_id=run_id, commit=target.commit[:12])
        started = time.monotonic()
        mode = self.mode  # for the whole run: a standby's run stays a report even if it takes over meanwhile
        self.store.start_run(run_id, trigger, mode, target.commit, target.subject)
        log.info("run.start", trigger=trigger, mode=mode, subject=target.subject)
        outcome, error, changes, applied, nodes = "error", None, 0, 0, 0
        run: Reconcile | None = None
        leases = contextlib.ExitStack()
        try:
            transport = leases.enter_context(self.sessions.lease(target.loaded, self.config.ssh.forks, cycle=True))
            if mode == "enforce":  # a leader gathers, applies and rolls out with its epoch on every request
                transport = fenced(self.ha, transport)
            run = open_reconcile(target.loaded, all_drivers(), forks=self.config.ssh.forks, transport=transport)
            run.gather()
            self._record_drained(run.ctx.facts.slurm_nodes, run.ctx.facts.slurm_view_error)
            plan = run.plan()
            pending = [FollowUp.model_validate(item) for item in self.store.get(PENDING_FOLLOWUPS) or []]
            carry_over(run.ctx, plan, pending)
            is_drift = target.commit == self.state.applied
            for change in plan.changing():
                change.drift = is_drift
            self._report_plan(plan, log, is_drift, run_id, target)
            changes, nodes = len(plan.changing()), len(plan.nodes_changing())
            error = _plan_problems(plan)
            if mode == "report" or not plan.has_changes:
                outcome = "drift" if plan.has_changes else ("partial" if error else "in-sync")
                if not plan.has_changes and not error:
                    self._mark_applied(target)
            elif not self.acts():
                outcome, error = "drift", "not applied: this daemon lost the lease before applying"
            elif not is_drift and (target.loaded.state.rollout.waves == "progressive"
                                   or target.loaded.state.rollout.upgrade is not None):  # reboots go node by node
                rollout = self._rollout(run, plan, target, run_id, log)
                applied = len(rollout.applied)
                self.store.mark_healed(rollout.applied)
                outcome, rollout_error = outcome_of(rollout)
                error = "; ".join(e for e in (rollout_error, error) if e) or None
                if outcome == "applied" and error:
                    outcome = "partial"
                if rollout.status == "failed" and self.state.failed_commit != target.commit:  # not rolled back
                    self._notify(lambda: notify.apply_failed_message(target.commit, rollout.failures, error,
                                                                     target.loaded.state.cluster.name, target.subject))
                if outcome == "applied":
                    self._mark_applied(target)
                    self.store.set(PENDING_FOLLOWUPS, None)
                    mirror(self.ha, {"followups": None}, required=False)
            else:
                result = self._apply(run, plan, log)
                applied = len(result.applied)
                self.store.mark_healed(result.applied)
                done = {id(c) for c in result.applied}
                self._export_drift([c for c in plan.changing() if id(c) not in done], plan, target)
                outcome, error = self._apply_outcome(result, plan, error)
                if outcome == "failed" and self.state.failed_commit != target.commit:  # the first failure only
                    self._notify(lambda: notify.apply_failed_message(target.commit, result.failures, error,
                                                                     target.loaded.state.cluster.name, target.subject))
                elif is_drift and result.applied and outcome != "stopped":
                    self._notify(lambda: notify.drift_healed_message(
                        target.commit, [(c.node, c.driver, c.resource, c.summary) for c in result.applied],
                        target.loaded.state.cluster.name))
                if outcome == "applied":
                    self._mark_applied(target)
                    self.store.set(PENDING_FOLLOWUPS, None)
                    mirror(self.ha, {"followups": None}, required=False)
            self._after_outcome(outcome, target.commit)
            self.last_state = target.loaded.state
            self.check_target = target.loaded
            applied_something = applied > 0 and outcome in ("applied", "partial")
            self._after_cycle(run, target, applied_something, applied, log)
        except Exception as exc:  # noqa: BLE001 - one bad run must never kill the daemon
            error = f"{type(exc).__name__}: {exc}"
            log.exception("run.error", error=error)
            self._after_outcome("error", target.commit)
        finally:
            leases.close()  # persistent sessions stay open; fresh ones (ssh_idle_timeout 0, --once) are closed
            structlog.contextvars.unbind_contextvars("run_id", "commit")
            self._count_connects()
        duration = time.monotonic() - started
        self.store.finish_run(run_id, outcome, changes=changes, applied=applied, nodes=nodes, error=error)
        self.metrics.duration.labels(mode=mode).observe(duration)
        self.metrics.runs.labels(outcome=outcome).inc()
        self.metrics.last_run.set(clock.wall())
        if outcome in ("applied", "in-sync", "drift"):
            self.metrics.last_success.set(clock.wall())
        self.state.last_reconcile = time.monotonic()
        log.info("run.end", outcome=outcome, changes=changes, applied=applied, seconds=round(duration, 2),
                 error=error)
        return outcome

    def _report_plan(self, plan: Plan, log: Any, is_drift: bool, run_id: str, target: Target) -> None:
        changing = plan.changing()
        for change in changing:
            log.info("drift.detected" if is_drift else "change.pending", node=change.node, driver=change.driver,
                     resource=change.resource, action=change.action, summary=change.summary)
        for node, why in plan.unreachable.items():
            log.warning("node.unreachable", node=node, error=why)
        self.store.record_drift(run_id, target.commit, changing, pending_commit=not is_drift)
        self._export_drift(changing, plan, target)
        self.metrics.unreachable.set(len(plan.unreachable))

    def _export_drift(self, changes: list[Change], plan: Plan, target: Target) -> None:
        """Set the drifted-resources gauge: these changes, zeros for every other node and planned driver."""
        drivers = sorted({c.driver for c in plan.changes} - {"ssh"})
        self.metrics.set_drift(changes, sorted(node_specs(target.loaded.state)), drivers)

    def _after_cycle(self, run: Reconcile, target: Target, applied_something: bool, applied: int, log: Any) -> None:
        """Hand health checks and PR reports to the workers (daemon) or run them now (--once)."""
        if not self.acts():
            return  # a standby never drains and never comments: its leader does
        if self.background is not None:
            if applied_something and self.config.checks_after_apply:
                self.background.checks.request(None, "after-apply")
            if applied == 0 and self.background.prs is not None:
                self.background.prs.publish(target.loaded, run.ctx.facts)
            return
        names = None if applied_something and self.config.checks_after_apply else self.due_checks()
        if names is None or names:
            self.run_checks(run.transport, target.loaded, names, "after-apply" if names is None else "schedule",
                            self.store, self.stop.is_set)
        if applied == 0 and self._prs_due(time.monotonic()):
            assert self.source is not None
            self.report_prs(self.source.repo, target.loaded, run.ctx.facts, self.store, log)

    def _count_connects(self) -> None:
        """Export the SSH connections opened since the last look (reconciler_ssh_connects_total)."""
        total = self.sessions.total_connects()
        if total > self._connects_seen:
            self.metrics.ssh_connects.inc(total - self._connects_seen)
        self._connects_seen = total

    def run_checks(self, transport: Transport, loaded: LoadedState, names: list[str] | None, why: str,
                   store: Store, should_stop: Callable[[], bool]) -> None:
        """Run health checks over TRANSPORT; record (in STORE), export, drain/resume as they decide."""
        from reconciler.checks.runner import ChecksCancelled, check_run

        state = loaded.state
        if not (state.checks.node or state.checks.nccl) or should_stop():
            return
        log = self.log.bind(commit=(loaded.commit or "")[:12])
        log.info("checks.start", reason=why, checks=names or "all")
        now = clock.utcnow()
        attempted = names or [c.name for c in state.checks.node] + [c.name for c in state.checks.nccl]
        for name in attempted:
            self.check_attempts[name] = now
            self.check_clock[name] = time.monotonic()
        try:
            checked = check_run(loaded, transport, store.conn, names=names,
                                log=lambda line: log.info("check.step", **_step_fields(line)),
                                should_stop=should_stop)
            results = checked.results
        except ChecksCancelled:
            for name in attempted:  # nothing recorded: due again as soon as nothing stops them
                self.check_attempts.pop(name, None)
                self.check_clock.pop(name, None)
            log.info("checks.cancelled", reason="daemon stopping" if self.stop.is_set() else "apply")
            return
        except Exception as exc:  # noqa: BLE001 - a broken check must not stop reconciling
            log.exception("checks.error", error=f"{type(exc).__name__}: {exc}")
            return
        if any(not r.skipped for r in results):
            self._refresh_drained(transport, state, store)
        drains = [(a.node, a.check, a.reason) for a in checked.actions if a.kind == "drain" and a.done]
        if drains:
            self._notify(lambda: notify.drained_message(drains, state.cluster.name))
        for result in results:
            if result.skipped:
                continue
            self.metrics.record_check(result.check, result.node, result.ok, result.value, result.gpu_seconds)
            (log.info if result.ok else log.warning)("check.result", check=result.check, node=result.node,
                                                      ok=result.ok, message=result.message, busbw=result.value)
        self.metrics.set_gpu_faults(check_store.latest(store.conn))

    def _record_drained(self, nodes: dict[str, SlurmNodeFact], error: str | None, store: Store | None = None) -> None:
        """Keep Slurm's draining/drained nodes and their reasons for the status page (not when Slurm did not answer)."""
        if error or not nodes:
            return
        drained = [{"node": n.name, "state": n.state, "reason": n.reason} for n in nodes.values() if n.drained]
        (store or self.store).set(DRAINED_KEY, {"at": clock.wall(), "nodes": sorted(drained, key=lambda d: d["node"])})
        self.metrics.set_drained({n.name: n.reason for n in nodes.values() if n.drained})

    def _refresh_drained(self, transport: Transport, state: DesiredState, store: Store) -> None:
        """Checks may have drained or resumed nodes: ask the controller again (one command)."""
        from reconciler.checks.slurm_view import fetch_view

        controller = node_specs(state).get(state.cluster.controllers[0])
        if controller is not None:
            view = fetch_view(transport, controller)
            self._record_drained(view.nodes, view.error, store)

    def report_prs(self, repo: Any, loaded: LoadedState, facts: ClusterFacts, store: Store, log: Any) -> None:
        """Plan every open pull request against these facts and keep one comment per PR current."""
        from reconciler.forge.config import TokenError, make_forge
        from reconciler.forge.pr_plan import report_pull_requests

        if self.config.forge is None or self.config.repository is None:
            return
        self.last_pr_report = time.monotonic()
        if self.forge is None:
            try:
                self.forge = make_forge(self.config.forge)
            except (TokenError, ValueError) as exc:
                log.error("prs.forge_unavailable", error=str(exc))
                return
        results = report_pull_requests(repo, self.config.repository.subdir, self.forge, facts,
                                       loaded, store.conn, self._checks_status(store), log,
                                       limits=self.config.forge.plan_limits.limits())
        if results:
            log.info("prs.done", **{status: sum(r.status == status for r in results)
                                    for status in {r.status for r in results}})

    def _checks_status(self, store: Store) -> list[str]:
        """One line per failing health check, for PR comments."""
        try:
            from reconciler.checks import store as check_store
        except ImportError:
            return []
        return [f"{r.check} on {r.node}: {r.message}" for r in check_store.latest(store.conn) if not r.ok]

    def _apply_options(self) -> ApplyOptions:
        return ApplyOptions(max_unavailable=self.config.max_unavailable, max_fail_percent=self.config.max_fail_percent,
                            drain_timeout=float(self.config.seconds("drain_timeout")),
                            should_stop=lambda: self.stop.is_set() or not self.acts())  # SIGTERM, or lease lost

    # ------------------------------------------------------------ progressive rollouts

    def _rollout(self, run: Reconcile, plan: Plan, target: Target, run_id: str, log: Any) -> RolloutResult:
        """Roll a new commit out in waves (reconciler/rollout), rolled back to the applied commit on a failed gate."""
        previous = self._target_of(self.state.applied) if self.state.applied else None
        if previous is not None and self.source is not None:
            self.source.checkout(target.commit)  # the work tree follows the commit being applied
        runner = RolloutRunner(target.loaded, previous.loaded if previous else None, run.transport,
                               self._apply_options(), MirroredJournal(self.store, self.ha),
                               log=lambda line: log.info("rollout.step", step=line),
                               on_event=lambda kind, data: self._rollout_event(kind, data, target))
        started = clock.wall()
        preempt = self.background.checks.cancel_jobs if self.background is not None else (lambda: None)
        with self.gate.applying(preempt, self.stop):
            result = runner.run(plan)
        self._finish_rollout(result, run_id, started)
        return result

    def recover(self, journal: dict[str, Any]) -> str:
        """Finish or roll back the rollout a killed daemon left in the journal (one run, trigger `recover`)."""
        run_id = _run_id()
        commit = str(journal.get("commit") or "")
        log = self.log.bind(run_id=run_id, commit=commit[:12])
        self.store.start_run(run_id, "recover", self.mode, commit or None, None)
        log.warning("rollout.recover", phase=journal.get("phase"), wave=int(journal.get("wave", 0)) + 1,
                    previous=journal.get("previous"))
        outcome, error, applied = "error", None, 0
        started = clock.wall()
        try:
            new = self._target_of(commit)
            old = self._target_of(journal["previous"]) if journal.get("previous") else None
            if new is None:
                raise RuntimeError(f"the commit in flight ({commit[:12]}) cannot be loaded again")
            if self.source is not None:
                self.source.checkout(commit)
            with self.sessions.lease(new.loaded, self.config.ssh.forks, cycle=True) as plain:
                transport = fenced(self.ha, plain)
                runner = RolloutRunner(new.loaded, old.loaded if old else None, transport, self._apply_options(),
                                       MirroredJournal(self.store, self.ha),
                                       log=lambda line: log.info("rollout.step", step=line),
                                       on_event=lambda kind, data: self._rollout_event(kind, data, new))
                with self.gate.applying(lambda: None, self.stop):
                    result = runner.resume(journal)
            self._finish_rollout(result, run_id, started)
            applied = len(result.applied)
            outcome, error = outcome_of(result)
            if outcome == "applied":
                self._mark_applied(new)
            self._after_outcome(outcome, commit)
        except Exception as exc:  # noqa: BLE001 - the journal stays: the next start tries again
            error = f"{type(exc).__name__}: {exc}"
            log.exception("rollout.recover_failed", error=error)
        self.store.finish_run(run_id, outcome, applied=applied, error=error)
        self.metrics.runs.labels(outcome=outcome).inc()
        self.state.last_reconcile = time.monotonic()
        return outcome

    def _finish_rollout(self, result: RolloutResult, run_id: str, started: float) -> None:
        """Record the rollout, remember a rolled-back commit, reset the wave gauge."""
        record = result.as_dict()
        self.store.record_rollout(run_id, record, started)
        self.metrics.rollout_wave.set(0)
        self.metrics.rollout_waves.set(0)
        if result.status in ("rolled-back", "rollback-failed") and result.commit:
            mark = {**rolled_back_record(result), "at": clock.wall(), "status": result.status}
            self.store.mark_rolled_back(result.commit, mark)
            mirror(self.ha, {"rolled_back": self.store.rolled_back()}, required=False)
            self.metrics.rollbacks.labels(gate=(result.failed_gate or {}).get("gate", "unknown")).inc()
            self._note_rollback_on_pr(result.commit, rolled_back_record(result))

    def _note_rollback_on_pr(self, commit: str, record: dict[str, Any]) -> None:
        """Say on the merged pull request of COMMIT (named by its merge message) that it was rolled back."""
        from reconciler.forge.config import make_forge
        from reconciler.forge.rolled_back import note_rolled_back

        if self.config.forge is None or self.source is None:
            return
        try:
            if self.forge is None:
                self.forge = make_forge(self.config.forge)
            message = str(self.source.repo.commit(commit).message)
            done = note_rolled_back(self.forge, message, commit, record)
            if done is not None:
                self.log.info("prs.rolled_back_noted", commit=commit[:12], action=done.action)
        except Exception as exc:  # noqa: BLE001 - a forge outage or a bad token must not stop anything
            self.log.warning("prs.rolled_back_note_failed", commit=commit[:12], error=f"{type(exc).__name__}: {exc}")

    def _rollout_event(self, kind: str, data: dict[str, Any], target: Target) -> None:
        """A rollout's progress: the wave gauge, and what notifications say."""
        if kind == "wave":
            self.metrics.rollout_wave.set(int(data["wave"]))
            self.metrics.rollout_waves.set(int(data["waves"]))
        notify_event = getattr(self, "notify_event", None)
        if notify_event is not None:
            notify_event(kind, data, target)

    # ------------------------------------------------------------ notifications (reconciler/daemon/notify.py)

    def _notify(self, build: Callable[[], Message | None]) -> None:
        """Build and queue a message when notifications are configured (never blocks, never raises); a standby
        sends none (its leader sends the same ones)."""
        if self.notifier is None or not self.acts():
            return
        try:  # called from inside applies, rollouts and checks: a message must never stop them
            self.notifier.send(build())
        except Exception as exc:  # noqa: BLE001
            self.log.exception("notify.error", error=f"{type(exc).__name__}: {exc}")

    def notify_event(self, kind: str, data: dict[str, Any], target: Target) -> None:
        """A rollout's start, end or rollback as one message (waves and the failure before a rollback: none)."""
        self._notify(lambda: notify.rollout_message(kind, data, target.loaded.state.cluster.name, target.subject))

    def _watch_source(self, error: str | None) -> None:
        """One message when fetches have failed for source_unreachable_after, one when they work again."""
        if self.notifier is None:
            return
        now = time.monotonic()
        source = self.config.repository.url if self.config.repository else "the repository"
        if error is None:
            if self._source_down_sent:
                self._notify(lambda: notify.source_message(redact_url_credentials(source), None, None))
            self._source_failing_since, self._source_down_sent = None, False
            return
        if self._source_failing_since is None:
            self._source_failing_since = now
        failing = now - self._source_failing_since
        if not self._source_down_sent and failing >= self.notifier.source_unreachable_after:
            self._source_down_sent = True
            self._notify(lambda: notify.source_message(redact_url_credentials(source), error, failing))

    def _target_of(self, commit: str | None) -> Target | None:
        """The target of an earlier commit (the applied one, a rollout's): from memory, or checked out again."""
        if commit is None:
            return None
        if self.applied_target is not None and self.applied_target.commit == commit:
            return self.applied_target
        if self.source is None or commit.startswith("local:"):
            return None  # local mode keeps only the applied content it saw
        directory = self.source.checkout(commit)
        return self._load_target(commit, self.source.subject(commit), directory)

    def _apply(self, run: Reconcile, plan: Plan, log: Any) -> ApplyResult:
        options = self._apply_options()
        preempt = self.background.checks.cancel_jobs if self.background is not None else (lambda: None)
        with self.gate.applying(preempt, self.stop) as preempted:  # never at the same time as a health check
            if preempted:
                log.info("checks.preempted", reason="apply")
            if plan.followups:
                # Journal the follow-ups first: a crash after the files are written must still restart the daemons.
                pending = [step.model_dump(mode="json") for step in plan.followups]
                self.store.set(PENDING_FOLLOWUPS, pending)
                mirror(self.ha, {"followups": pending}, required=True)
            return run.apply(plan, options, log=lambda line: log.info("apply.step", **_step_fields(line)))

    def _apply_outcome(self, result: ApplyResult, plan: Plan, error: str | None) -> tuple[str, str | None]:
        problems = [f"{node}: {m}" for node, ms in sorted(result.failures.items()) for m in ms]
        if result.stopped:
            problems.append(result.stopped)
        if error:
            problems.append(error)
        if result.stopped and self.stop.is_set():
            return "stopped", "; ".join(problems)
        if result.failures or result.stopped:
            return "failed", "; ".join(problems)
        if result.held:  # the daemon never reboots or reloads a driver: such changes wait for a human
            needs = sorted({c.needs or "" for c in result.held})
            problems.append(f"{len(result.held)} change(s) held, not applied: they need {' or '.join(needs)} "
                            "(apply them with `reconciler apply --allow ...`)")
            return "partial", "; ".join(problems)
        return ("partial", error) if error else ("applied", None)

    def _after_outcome(self, outcome: str, commit: str) -> None:
        """Backoff for failures of the same commit; a newer commit is tried at once."""
        if outcome in ("failed", "error", "partial"):
            if commit != self.state.failed_commit:
                self.state.failures = 0
            self.state.failures += 1
            self.state.failed_commit = commit
            backoff = parse_duration(self.config.retry.initial) * 2 ** (self.state.failures - 1)
            delay = float(min(backoff, parse_duration(self.config.retry.max)))
            self.state.retry_at = time.monotonic() + delay
            self.log.warning("run.retry_scheduled", commit=commit, attempt=self.state.failures, in_seconds=delay)
        elif outcome != "stopped":
            self.state.failures, self.state.retry_at, self.state.failed_commit = 0, 0.0, None

    def _mark_applied(self, target: Target) -> None:
        self.applied_target = target
        self.state.applied = target.commit
        self.store.set("applied_commit", target.commit)
        self.store.set("applied_at", clock.wall())
        self.metrics.set_commit(self.metrics.applied_commit, target.commit, target.subject)
        mirror(self.ha, {"applied": {"commit": target.commit, "at": clock.wall()}}, required=False)


def _plan_problems(plan: Plan) -> str | None:
    problems = list(plan.errors) + [f"{n}: unreachable ({why})" for n, why in sorted(plan.unreachable.items())]
    return "; ".join(problems) if problems else None


def _step_fields(line: str) -> dict[str, str]:
    """Split an applier line `node: what` into log fields."""
    node, sep, what = line.partition(": ")
    if sep and " " not in node:
        return {"node": node, "step": what}
    return {"step": line}


def _run_id() -> str:
    return uuid.uuid4().hex[:12]
