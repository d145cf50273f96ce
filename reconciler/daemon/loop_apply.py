"""The reconcile loop's applying side: a plain apply or a progressive rollout (and the recovery of one a killed
daemon left), how each ended as one Outcome, their records, and what becomes the applied commit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reconciler.checks.rollout_site import slurm_site
from reconciler.common import clock
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.leadership import MirroredJournal, fenced, mirror
from reconciler.daemon.loop_core import Common, Notices, Role, new_run_id, step_fields
from reconciler.daemon.loop_schedule import Schedule
from reconciler.daemon.loop_state import LoopState, Target
from reconciler.daemon.operator import StoreDesk
from reconciler.daemon.rollouts import outcome_of, rolled_back_record
from reconciler.daemon.sessions import Sessions
from reconciler.daemon.store import PENDING_FOLLOWUPS
from reconciler.daemon.workers import Gate
from reconciler.engine.apply import ApplyOptions, ApplyResult
from reconciler.engine.plan import Change, Plan
from reconciler.engine.run import Reconcile
from reconciler.rollout.journal import RolloutJournal
from reconciler.rollout.runner import RolloutResult, RolloutRunner


@dataclass
class Outcome:
    """How an apply or a rollout ended, as the run records it: FAILED says a failure is to be notified (an apply's
    failures, a rollout that failed without being rolled back)."""

    outcome: str
    error: str | None
    applied: list[Change] = field(default_factory=list)
    failures: dict[str, list[str]] = field(default_factory=dict)
    failed: bool = False
    acted: bool = False  # an apply or a rollout ran (a report, or a standby's run, did not)


class Applying:
    """Apply or roll out a plan, record how it went, and remember what is applied (ON_APPLIED hears of each)."""

    def __init__(self, common: Common, role: Role, notices: Notices, state: LoopState, schedule: Schedule,
                 sessions: Sessions, gate: Gate, source: GitSource | None,
                 target_of: Callable[[str | None], Target | None],
                 note_rollback: Callable[[str, dict[str, Any]], None],
                 on_applied: Callable[[Target], None]) -> None:
        self.common, self.role, self.notices, self.state, self.schedule = common, role, notices, state, schedule
        self.sessions, self.gate, self.source = sessions, gate, source
        self.target_of, self.note_rollback, self.on_applied = target_of, note_rollback, on_applied
        self.preempt: Callable[[], None] = lambda: None  # cancels the check worker's jobs (Reconciler.start_workers)

    def options(self) -> ApplyOptions:
        """The daemon's apply options; it stops on SIGTERM or when the lease is lost."""
        config, stop = self.common.config, self.common.stop
        return ApplyOptions(max_unavailable=config.max_unavailable, max_fail_percent=config.max_fail_percent,
                            drain_timeout=float(config.seconds("drain_timeout")),
                            should_stop=lambda: stop.is_set() or not self.role.acts())

    # ------------------------------------------------------------ progressive rollouts

    def rollout(self, run: Reconcile, plan: Plan, target: Target, run_id: str, log: Any, error: str | None) -> Outcome:
        """Roll a new commit out in waves (reconciler/rollout), rolled back to the applied commit on a failed gate;
        ERROR: the plan's own problems, kept in the outcome."""
        previous = self.target_of(self.state.applied) if self.state.applied else None
        if previous is not None and self.source is not None:
            self.source.checkout(target.commit)  # the work tree follows the commit being applied
        runner = self._runner(target, previous, run.transport, log)
        started = clock.wall()
        with self.gate.applying(self.preempt, self.common.stop):
            result = runner.run(plan)
        self._finish_rollout(result, run_id, started)
        outcome, rollout_error = outcome_of(result)
        error = "; ".join(e for e in (rollout_error, error) if e) or None
        if outcome == "applied" and error:
            outcome = "partial"
        return Outcome(outcome, error, result.applied, result.failures, failed=result.status == "failed", acted=True)

    def recover(self, journal: RolloutJournal, trigger: str = "recover") -> str:
        """Finish or roll back the rollout a killed daemon left in the journal (one run, trigger `recover`), or
        the operator's retry after its rollout ended (loop_retry.py: trigger `retry`)."""
        store = self.common.store
        run_id = new_run_id()
        commit = journal.commit or ""
        log = self.common.log.bind(run_id=run_id, commit=commit[:12])
        store.start_run(run_id, trigger, self.role.mode(self.common.config.mode), commit or None, None)
        if trigger == "retry":
            log.info("rollout.retry", nodes=[n for w in journal.wave_plan().waves for n in w.nodes])
        else:
            log.warning("rollout.recover", phase=journal.phase.value, wave=journal.wave + 1, previous=journal.previous)
        outcome, error, applied = "error", None, 0
        started = clock.wall()
        try:
            new = self.target_of(commit)
            old = self.target_of(journal.previous) if journal.previous else None
            if new is None:
                raise RuntimeError(f"the commit in flight ({commit[:12]}) cannot be loaded again")
            if self.source is not None:
                self.source.checkout(commit)
            with self.sessions.lease(new.loaded, self.common.config.ssh.forks, cycle=True) as plain:
                runner = self._runner(new, old, fenced(self.role.ha, plain), log)
                with self.gate.applying(lambda: None, self.common.stop):
                    result = runner.resume(journal)
            self._finish_rollout(result, run_id, started)
            applied = len(result.applied)
            outcome, error = outcome_of(result)
            if outcome == "applied":
                self.mark_applied(new)
            self.schedule.after_outcome(outcome, commit)
        except Exception as exc:  # noqa: BLE001 - the journal stays: the next start tries again
            error = f"{type(exc).__name__}: {exc}"
            log.exception("rollout.recover_failed", error=error)
        store.finish_run(run_id, outcome, applied=applied, error=error)
        self.common.metrics.runs.labels(outcome=outcome).inc()
        self.schedule.ended()
        return outcome

    def _runner(self, target: Target, previous: Target | None, transport: Any, log: Any) -> RolloutRunner:
        return RolloutRunner(target.loaded, previous.loaded if previous else None, transport, self.options(),
                             MirroredJournal(self.common.store, self.role.ha), slurm_site(),
                             log=lambda line: log.info("rollout.step", step=line),
                             on_event=lambda kind, data: self.rollout_event(kind, data, target),
                             operator=StoreDesk(self.common.store.path))

    def _finish_rollout(self, result: RolloutResult, run_id: str, started: float) -> None:
        """Record the rollout, remember a rolled-back commit, reset the wave gauge."""
        store, metrics = self.common.store, self.common.metrics
        record = result.as_dict()
        store.record_rollout(run_id, record, started)
        metrics.rollout_wave.set(0)
        metrics.rollout_waves.set(0)
        if result.status in ("rolled-back", "rollback-failed") and result.commit:
            mark = {**rolled_back_record(result), "at": clock.wall(), "status": result.status}
            store.mark_rolled_back(result.commit, mark)
            mirror(self.role.ha, {"rolled_back": store.rolled_back()}, required=False)
            metrics.rollbacks.labels(gate=(result.failed_gate or {}).get("gate", "unknown")).inc()
            self.note_rollback(result.commit, rolled_back_record(result))

    def rollout_event(self, kind: str, data: dict[str, Any], target: Target) -> None:
        """A rollout's progress: the wave gauge, and what notifications say."""
        if kind == "wave":
            self.common.metrics.rollout_wave.set(int(data["wave"]))
            self.common.metrics.rollout_waves.set(int(data["waves"]))
        self.notices.rollout(kind, data, target)

    # ------------------------------------------------------------ plain applies

    def apply(self, run: Reconcile, plan: Plan, log: Any, error: str | None) -> Outcome:
        """Apply the whole plan at once (never beside a health check); ERROR: the plan's own problems."""
        with self.gate.applying(self.preempt, self.common.stop) as preempted:
            if preempted:
                log.info("checks.preempted", reason="apply")
            if plan.followups:
                # Journal the follow-ups first: a crash after the files are written must still restart the daemons.
                pending = [step.model_dump(mode="json") for step in plan.followups]
                self.common.store.set(PENDING_FOLLOWUPS, pending)
                mirror(self.role.ha, {"followups": pending}, required=True)
            result = run.apply(plan, self.options(), log=lambda line: log.info("apply.step", **step_fields(line)))
        outcome, error = self._apply_outcome(result, error)
        return Outcome(outcome, error, result.applied, result.failures, failed=outcome == "failed", acted=True)

    def _apply_outcome(self, result: ApplyResult, error: str | None) -> tuple[str, str | None]:
        problems = [f"{node}: {m}" for node, ms in sorted(result.failures.items()) for m in ms]
        if result.stopped:
            problems.append(result.stopped)
        if error:
            problems.append(error)
        if result.stopped and self.common.stop.is_set():
            return "stopped", "; ".join(problems)
        if result.failures or result.stopped:
            return "failed", "; ".join(problems)
        if result.held:  # the daemon never reboots or reloads a driver: such changes wait for a human
            needs = sorted({c.needs or "" for c in result.held})
            problems.append(f"{len(result.held)} change(s) held, not applied: they need {' or '.join(needs)} "
                            "(apply them with `reconciler apply --allow ...`)")
            return "partial", "; ".join(problems)
        return ("partial", error) if error else ("applied", None)

    # ------------------------------------------------------------ what is applied

    def mark_applied(self, target: Target) -> None:
        """TARGET is the applied commit now: remembered, stored, exported, mirrored; then ON_APPLIED hears of it."""
        store, now = self.common.store, clock.wall()
        self.state.applied_target = target
        self.state.applied = target.commit
        store.set("applied_commit", target.commit)
        store.set("applied_at", now)
        self.common.metrics.set_commit(self.common.metrics.applied_commit, target.commit, target.subject)
        mirror(self.role.ha, {"applied": {"commit": target.commit, "at": now}}, required=False)
        self.on_applied(target)

    def followups_done(self) -> None:
        """The journalled follow-ups ran (the apply or rollout ended applied): forget them, here and by the lease."""
        self.common.store.set(PENDING_FOLLOWUPS, None)
        mirror(self.role.ha, {"followups": None}, required=False)
