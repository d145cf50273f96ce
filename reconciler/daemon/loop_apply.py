"""The reconcile loop's applying side: a plain apply or a progressive rollout (and the recovery of one a killed
daemon left), their outcomes and records, the retry backoff, and what becomes the applied commit."""

from __future__ import annotations

import time
from typing import Any

from reconciler.common import clock
from reconciler.daemon.leadership import MirroredJournal, fenced, mirror
from reconciler.daemon.loop_core import new_run_id, step_fields
from reconciler.daemon.loop_prs import PrReports
from reconciler.daemon.loop_source import TargetSource
from reconciler.daemon.loop_state import Target
from reconciler.daemon.rollouts import outcome_of, rolled_back_record
from reconciler.daemon.store import PENDING_FOLLOWUPS
from reconciler.engine.apply import ApplyOptions, ApplyResult
from reconciler.engine.plan import Plan
from reconciler.engine.run import Reconcile
from reconciler.model import parse_duration
from reconciler.rollout.runner import RolloutResult, RolloutRunner


class Applying(TargetSource, PrReports):
    """Apply or roll out a plan, record how it went, and decide what is applied and when to retry."""

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
        run_id = new_run_id()
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

    def _rollout_event(self, kind: str, data: dict[str, Any], target: Target) -> None:
        """A rollout's progress: the wave gauge, and what notifications say."""
        if kind == "wave":
            self.metrics.rollout_wave.set(int(data["wave"]))
            self.metrics.rollout_waves.set(int(data["waves"]))
        notify_event = getattr(self, "notify_event", None)
        if notify_event is not None:
            notify_event(kind, data, target)

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
            return run.apply(plan, options, log=lambda line: log.info("apply.step", **step_fields(line)))

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
