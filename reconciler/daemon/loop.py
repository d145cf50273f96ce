"""The reconcile loop: pick the newest valid commit, plan it against the live cluster, apply or report.

The loop holds its parts as objects, each with its own state and handed what it uses: the schedule
(loop_schedule: drift interval, retry backoff), the target source (loop_source: Git or the watched directory),
the health checks (loop_checks), the PR reports (loop_prs), applies and rollouts (loop_apply) and the promotion
gate (loop_promotion); what they share is in loop_core (Common, Role, Notices). Target and LoopState live in
loop_state.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import structlog

from reconciler.checks import store as check_store
from reconciler.common import clock
from reconciler.daemon import notify, windows_view
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.leadership import MirroredJournal, fenced, take_over
from reconciler.daemon.loop_apply import Applying, Outcome
from reconciler.daemon.loop_checks import HealthChecks
from reconciler.daemon.loop_core import Common, Notices, Role, new_run_id
from reconciler.daemon.loop_promotion import Promotion
from reconciler.daemon.loop_prs import PrReports
from reconciler.daemon.loop_retry import retry_journal
from reconciler.daemon.loop_schedule import Schedule
from reconciler.daemon.loop_source import Targets
from reconciler.daemon.loop_state import LoopState, Target
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.notify import Notifier
from reconciler.daemon.sessions import Sessions
from reconciler.daemon.store import PENDING_FOLLOWUPS, Store
from reconciler.daemon.workers import Background, Gate
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import LoadedState
from reconciler.drivers import all_drivers
from reconciler.engine.followups import FollowUp
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import carry_over
from reconciler.engine.run import Reconcile, open_reconcile
from reconciler.ha.lease import LeaseError
from reconciler.ha.role import HighAvailability
from reconciler.rollout.journal import JournalRefused
from reconciler.rollout.windows import closed

__all__ = ["LoopState", "Reconciler", "Target"]


class Reconciler:
    """One daemon's reconcile loop: it holds the loop's parts and runs `cycle()` when the process loop calls it."""

    def __init__(self, config: DaemonConfig, store: Store, metrics: Metrics, stop: Any,
                 config_dir: Path | None = None, sessions: Sessions | None = None) -> None:
        self.log = structlog.get_logger("reconciler")
        self.common = Common(config, store, metrics, stop, config_dir or Path.cwd(), self.log)
        self.store, self.metrics, self.stop = store, metrics, stop
        self.source = (GitSource(config.repository, config.state_path / "repo", config.signing)
                       if config.repository else None)
        self.state = LoopState(good=store.get("good_commit"), applied=store.get("applied_commit"),
                               seen_head=store.get("seen_head"))
        # SSH sessions: fresh per cycle unless the daemon gives persistent ones; workers: None in --once mode
        # (checks and PR reports then run inline after the cycle, as the one-shot always did).
        self.sessions = sessions or Sessions(0)
        self.gate = Gate()
        self.background: Background | None = None
        # Two login nodes (config `ha:`): the role (its `ha` set by make_ha), and the desired state the lease thread
        # reaches the lease node with (reconciler/daemon/leadership.py).
        self.role = Role()
        self.ha_loaded: LoadedState | None = None
        self.notices = Notices(Notifier(config.notifications, self.common.config_dir) if config.notifications
                               else None, self.role, self.log)
        self.schedule = Schedule(self.common)
        self.targets = Targets(self.common, self.state, self.source, self.notices)
        self.checks = HealthChecks(self.common, self.notices)
        self.prs = PrReports(self.common, self.source)
        self.promotion = Promotion(self.common, self.state, self.source, self.targets.target_of, self.notices,
                                   lambda: self.role.ha)
        self.apply = Applying(self.common, self.role, self.notices, self.state, self.schedule, self.sessions,
                              self.gate, self.source, self.targets.target_of, self.prs.note_rollback,
                              on_applied=self.promotion.applied)
        self._connects_seen = 0
        head = store.get("head_status") or {}
        metrics.source_ok.set(1 if head.get("status") == "valid" else 0)  # a restart keeps the last verdict
        with contextlib.suppress(sqlite3.Error):  # a restart keeps the GPU faults of the latest results too
            metrics.set_gpu_faults(check_store.latest(store.conn))

    # ------------------------------------------------------------ the daemon around the loop

    @property
    def config(self) -> DaemonConfig:
        """The daemon config in force (replaced by `reload`)."""
        return self.common.config

    @property
    def ha(self) -> HighAvailability | None:
        """This daemon's pair role (None: a single daemon)."""
        return self.role.ha

    @property
    def mode(self) -> str:
        """The configured mode while acting; `report` on a standby."""
        return self.role.mode(self.config.mode)

    def acts(self) -> bool:
        """Whether this daemon may change the cluster: a single daemon always, one of a pair while it leads."""
        return self.role.acts()

    def takeover_due(self) -> bool:
        """Whether this daemon became the leader and has not taken over yet (the loop runs a cycle at once)."""
        return self.role.takeover_due()

    def due(self, now: float) -> bool:
        """Whether a drift check or retry is due (NOW: time.monotonic())."""
        return self.schedule.due(now)

    def next_wake(self, now: float) -> float:
        """Seconds until the next drift check or retry (NOW: time.monotonic())."""
        return self.schedule.next_wake(now)

    def start_workers(self) -> Background:
        """Start the check and PR workers (the daemon; --once runs both inline after its cycle)."""
        self.background = Background(self, self.sessions, self.gate, self.store.path)
        self.apply.preempt = self.background.checks.cancel_jobs
        self.background.start()
        return self.background

    def reload(self, config: DaemonConfig, notifier: Notifier | None) -> None:
        """SIGHUP: the new config and notifier (the old one closed); SSH idle timeout and Git settings follow."""
        if self.notices.notifier is not None:
            self.notices.notifier.close(timeout=1.0)
        self.notices.notifier = notifier
        self.common.config = config
        self.sessions.set_idle_timeout(float(config.seconds("ssh_idle_timeout")))
        if config.repository and self.source is not None:
            self.source.cfg, self.source.signing = config.repository, config.signing

    # ------------------------------------------------------------ one cycle

    def cycle(self, trigger: str, force: bool = False) -> str | None:
        """Resolve the target and reconcile it when new, due or forced; return the run's outcome (or None)."""
        self.metrics.drift_interval.set(self.config.seconds("drift_interval"))
        target, new = self.targets.resolve()
        if target is None:
            self.log.warning("cycle.no_target", reason="no valid desired state yet")
            return None
        if self.role.ha is not None and self._lead(target):
            force, trigger = True, "takeover"
        try:
            journal = MirroredJournal(self.store, self.role.ha).load()
        except JournalRefused as exc:  # the message says what to do
            self.log.error("rollout.journal_refused", error=str(exc))
            if self.mode == "enforce":  # neither resumed nor overwritten by a new rollout; report mode never applies
                return None
            journal = None
        if journal is not None and self.mode == "enforce":
            return self.apply.recover(journal)
        if self.mode == "enforce" and (retry := retry_journal(self.store, self.state.applied)) is not None:
            MirroredJournal(self.store, self.role.ha).save(retry)  # a kill during the retry finishes it
            return self.apply.recover(retry, trigger="retry")  # the operator's, after its rollout ended
        if self.config.cluster is not None:  # promotion.yaml may hold the commit back (loop_promotion.py)
            target = self.promotion.gate(target)
            if target is None:
                return None
            trigger = self.promotion.trigger or trigger  # a hotfix or a going back asked by the operator
        target = self._unless_rolled_back(target)
        if target is None:
            return None
        pending = target.commit != self.state.applied
        if not self.schedule.wants(target.commit, pending, new, force, time.monotonic()):
            return None
        return self.reconcile(target, trigger)

    def _lead(self, target: Target) -> bool:
        """Renew or take the lease (first cycle), take over when newly leader; True when a takeover happened."""
        ha = self.role.ha
        assert ha is not None
        self.ha_loaded = target.loaded
        if not ha.started:
            ha.tick()
            ha.start(self.stop)
        if not self.role.takeover_due():
            return False
        epoch = ha.epoch
        try:
            take_over(self, ha)
        except LeaseError as exc:  # without the predecessor's journal it is not safe to act: let the term go
            self.log.error("ha.takeover_failed", error=str(exc), epoch=epoch)
            ha.step_down(f"could not read the crash journal: {exc}")
            return False
        self.role.acted_epoch = epoch
        return True

    def _unless_rolled_back(self, target: Target) -> Target | None:
        """TARGET, or the applied commit's target when a rollout rolled TARGET back (said once per commit)."""
        rolled_back = self.store.rolled_back()
        if target.commit not in rolled_back:
            return target
        if self.state.skipped != target.commit:
            self.log.warning("commit.rolled_back_skipped", commit=target.commit, keeping=self.state.applied,
                             gate=rolled_back[target.commit].get("gate"))
            self.state.skipped = target.commit
        return self.targets.target_of(self.state.applied) if self.state.applied else None

    def reconcile(self, target: Target, trigger: str) -> str:
        """Gather, plan, and apply (enforce) or report (report mode); record everything."""
        run_id = new_run_id()
        log = self.log.bind(run_id=run_id, commit=target.commit[:12])
        structlog.contextvars.bind_contextvars(run_id=run_id, commit=target.commit[:12])
        started = time.monotonic()
        mode = self.mode  # for the whole run: a standby's run stays a report even if it takes over meanwhile
        self.store.start_run(run_id, trigger, mode, target.commit, target.subject)
        log.info("run.start", trigger=trigger, mode=mode, subject=target.subject)
        done, changes, nodes = Outcome("error", None), 0, 0
        leases = contextlib.ExitStack()
        try:
            transport = leases.enter_context(self.sessions.lease(target.loaded, self.config.ssh.forks, cycle=True))
            if mode == "enforce":  # a leader gathers, applies and rolls out with its epoch on every request
                transport = fenced(self.role.ha, transport)
            run = open_reconcile(target.loaded, all_drivers(), forks=self.config.ssh.forks, transport=transport)
            is_drift = target.commit == self.state.applied
            plan = self._plan(run, target, is_drift, run_id, log)
            changes, nodes = len(plan.changing()), len(plan.nodes_changing())
            done = self._act(run, plan, target, is_drift, mode, run_id, log)
            self._settle(done, target, is_drift)
            self.schedule.after_outcome(done.outcome, target.commit)
            self.checks.target = target.loaded
            applied_something = bool(done.applied) and done.outcome in ("applied", "partial")
            self._after_cycle(run, target, applied_something, len(done.applied), log)
        except Exception as exc:  # noqa: BLE001 - one bad run must never kill the daemon
            done.error = f"{type(exc).__name__}: {exc}"
            log.exception("run.error", error=done.error)
            self.schedule.after_outcome("error", target.commit)
        finally:
            leases.close()  # persistent sessions stay open; fresh ones (ssh_idle_timeout 0, --once) are closed
            structlog.contextvars.unbind_contextvars("run_id", "commit")
            self._count_connects()
        self._record_end(run_id, mode, done, changes, nodes, time.monotonic() - started, log)
        return done.outcome

    def _plan(self, run: Reconcile, target: Target, is_drift: bool, run_id: str, log: Any) -> Plan:
        """Gather (keeping what Slurm says is drained), plan, carry journalled follow-ups over, report the plan."""
        asked = clock.wall()
        run.gather()
        self.checks.record_drained(run.ctx.facts.slurm_nodes, run.ctx.facts.slurm_view_error, asked=asked)
        plan = run.plan()
        pending = [FollowUp.model_validate(item) for item in self.store.get(PENDING_FOLLOWUPS) or []]
        carry_over(run.ctx, plan, pending)
        for change in plan.changing():
            change.drift = is_drift
        self._report_plan(plan, log, is_drift, run_id, target)
        return plan

    def _act(self, run: Reconcile, plan: Plan, target: Target, is_drift: bool, mode: str, run_id: str,
             log: Any) -> Outcome:
        """Report the plan, or apply it: in waves for a new commit that rolls out progressively, else at once."""
        error = _plan_problems(plan)
        rollout = target.loaded.state.rollout
        windows_view.record(self.store, rollout)
        if mode == "report" or not plan.has_changes:
            return Outcome("drift" if plan.has_changes else ("partial" if error else "in-sync"), error)
        if not self.role.acts():
            return Outcome("drift", "not applied: this daemon lost the lease before applying")
        shut = closed(rollout.windows, rollout.windows_apply_to)
        if shut is not None:  # windows_apply_to: all; the next cycle looks again (a pending commit is retried)
            return Outcome("drift", "not applied: outside the maintenance windows (rollout.windows_apply_to: all); "
                                    + shut.text())
        if not is_drift and (rollout.waves == "progressive" or rollout.upgrade is not None):
            return self.apply.rollout(run, plan, target, run_id, log, error)  # reboots go node by node
        done = self.apply.apply(run, plan, log, error)
        finished = {id(c) for c in done.applied}
        self._export_drift([c for c in plan.changing() if id(c) not in finished], plan, target)
        return done

    def _settle(self, done: Outcome, target: Target, is_drift: bool) -> None:
        """What an outcome leaves: drift healed, the first failure or a healed drift notified, the applied commit."""
        if done.outcome == "in-sync":
            self.apply.mark_applied(target)
        if not done.acted:
            return
        self.store.mark_healed(done.applied)
        cluster = target.loaded.state.cluster.name
        if done.failed and self.schedule.failed_commit != target.commit:  # the first failure only
            self.notices.send(lambda: notify.apply_failed_message(target.commit, done.failures, done.error,
                                                                  cluster, target.subject))
        elif is_drift and done.applied and done.outcome != "stopped":
            self.notices.send(lambda: notify.drift_healed_message(
                target.commit, [(c.node, c.driver, c.resource, c.summary) for c in done.applied], cluster))
        if done.outcome == "applied":
            self.apply.mark_applied(target)
            self.apply.followups_done()

    def _record_end(self, run_id: str, mode: str, done: Outcome, changes: int, nodes: int, duration: float,
                    log: Any) -> None:
        """The run's row, metrics and last log line."""
        applied = len(done.applied)
        self.store.finish_run(run_id, done.outcome, changes=changes, applied=applied, nodes=nodes, error=done.error)
        self.metrics.duration.labels(mode=mode).observe(duration)
        self.metrics.runs.labels(outcome=done.outcome).inc()
        self.metrics.last_run.set(clock.wall())
        if done.outcome in ("applied", "in-sync", "drift"):
            self.metrics.last_success.set(clock.wall())
        self.schedule.ended()
        log.info("run.end", outcome=done.outcome, changes=changes, applied=applied, seconds=round(duration, 2),
                 error=done.error)

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
        names = None if applied_something and self.config.checks_after_apply else self.checks.due()
        if names is None or names:
            self.checks.run(run.transport, target.loaded, names, "after-apply" if names is None else "schedule",
                            self.store, self.stop.is_set)
        if applied == 0 and self.prs.due(time.monotonic()):
            assert self.source is not None
            self.prs.report(self.source.repo, target.loaded, run.ctx.facts, self.store, log)

    def _count_connects(self) -> None:
        """Export the SSH connections opened since the last look (reconciler_ssh_connects_total)."""
        total = self.sessions.total_connects()
        if total > self._connects_seen:
            self.metrics.ssh_connects.inc(total - self._connects_seen)
        self._connects_seen = total


def _plan_problems(plan: Plan) -> str | None:
    problems = list(plan.errors) + [f"{n}: unreachable ({why})" for n, why in sorted(plan.unreachable.items())]
    return "; ".join(problems) if problems else None
