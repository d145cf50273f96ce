"""The reconcile loop: pick the newest valid commit, plan it against the live cluster, apply or report.

This module is the cycle itself; the loop's other jobs are its base classes: loop_core (state, role in a pair,
notifications), loop_source (the target), loop_checks (drift and health-check scheduling), loop_prs (PR reports),
loop_apply (applies, rollouts, run records), loop_promotion (the promotion gate of a multi-cluster
repository). Target and LoopState live in loop_state.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import structlog

from reconciler.common import clock
from reconciler.daemon import notify
from reconciler.daemon.leadership import MirroredJournal, fenced, mirror
from reconciler.daemon.loop_checks import Schedules
from reconciler.daemon.loop_core import new_run_id
from reconciler.daemon.loop_promotion import Promoting
from reconciler.daemon.loop_state import LoopState, Target
from reconciler.daemon.rollouts import outcome_of
from reconciler.daemon.store import PENDING_FOLLOWUPS
from reconciler.desired.inventory import node_specs
from reconciler.drivers import all_drivers
from reconciler.engine.followups import FollowUp
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import carry_over
from reconciler.engine.run import Reconcile, open_reconcile

__all__ = ["LoopState", "Reconciler", "Target"]


class Reconciler(Promoting, Schedules):
    """One daemon's reconcile logic; `cycle()` is called by the process loop."""

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
        if self.config.cluster is not None:  # promotion.yaml may hold the commit back (loop_promotion.py)
            target = self._promote(target)
            if target is None:
                return None
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
        run_id = new_run_id()
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
            asked = clock.wall()
            run.gather()
            self._record_drained(run.ctx.facts.slurm_nodes, run.ctx.facts.slurm_view_error, asked=asked)
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


def _plan_problems(plan: Plan) -> str | None:
    problems = list(plan.errors) + [f"{n}: unreachable ({why})" for n, why in sorted(plan.unreachable.items())]
    return "; ".join(problems) if problems else None
