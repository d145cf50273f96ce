"""Apply a commit wave by wave, gate each wave, soak, and roll the waves back to the last good state on a failure.

The engine applies a desired state to a node set (`open_reconcile(..., limit=...)`); this layer decides the sets
and the order, runs the gates, and on a failed gate plans the *previous* desired state against every node the
commit reached (the same drivers, with their consequences: reconfigure, restarts), applies it, then resumes the
drains Slurm set because of the bad commit (Prolog/Epilog errors during the rollout) and the ones the reconciler
set itself, never anyone else's. With no previous state (`reconciler apply` without --previous, a first commit)
the reached nodes get back the before-images the waves' plans read (reconciler/engine/restore.py) instead. Every
step is written to a journal first, so a killed process can finish or roll back what it was doing on its next
start (`resume`). What it needs of the cluster (the drivers, the workload manager, the gates, the upgrade machine's
hooks) its callers pass in (`RolloutSite`, engine/workload.py): nothing here imports a driver, a check or Slurm.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from reconciler.common import hostlist
from reconciler.common.failpoints import failpoint
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import LoadedState
from reconciler.engine.apply import ApplyOptions, ApplyResult
from reconciler.engine.before_image import BeforeImage, capture
from reconciler.engine.followups import FollowUp
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import carry_over
from reconciler.engine.restore import restore
from reconciler.engine.run import open_reconcile
from reconciler.engine.workload import GateResult, NodesView, RolloutSite, WorkloadManager, new_drains
from reconciler.rollout.admission import Admission, Admissions
from reconciler.rollout.capacity import CapacityAdmission, capacity_of
from reconciler.rollout.journal import Journal, Phase, RolloutJournal, SeenBefore, SeenNode
from reconciler.rollout.operator import Desk, PauseAdmission
from reconciler.rollout.preview import bootstrap_reason
from reconciler.rollout.upgrade import UpgradeMachine
from reconciler.rollout.waves import WavePlan, plan_waves
from reconciler.rollout.windows import WindowAdmission
from reconciler.transport.base import Transport

LATE_DRAINS = 2.0  # seconds between looks for drains Slurm records after the gate saw the first ones
MAX_FAILED = 20  # failed changes an apply gate's record names (node, resource, what, error)
Status = Literal["complete", "rolled-back", "rollback-failed", "failed", "stopped"]
Log = Callable[[str], None]


@dataclass
class RolloutResult:
    """How a rollout ended, wave by wave."""

    status: Status
    commit: str | None
    previous: str | None
    waves: WavePlan
    timeline: list[dict[str, Any]] = field(default_factory=list)
    failed_wave: int | None = None
    failed_gate: dict[str, Any] | None = None
    rollback: dict[str, Any] | None = None
    applied: list[Change] = field(default_factory=list)
    failures: dict[str, list[str]] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)
    held: list[Change] = field(default_factory=list)  # needing a reboot/driver reload the caller did not allow
    upgrade: dict[str, Any] | None = None  # the upgrade machine's node states as the rollout ended (its rollback's)

    @property
    def reason(self) -> str:
        """One line: what ended the rollout."""
        if self.status == "complete":
            failed = self.upgrade_failed
            return f"{len(self.waves.waves)} wave(s) applied and gated" + (
                f"; {len(failed)} node(s) failed the upgrade (within failure_budget) and stay drained for a human: "
                + "; ".join(f"{n}: {why}" for n, why in sorted(failed.items())) if failed else "")
        gate = self.failed_gate or {}
        where = f"wave {self.failed_wave}" if self.failed_wave else "rollout"
        return f"{where}: {gate.get('gate', '?')} gate failed: {gate.get('message', '')}"

    @property
    def upgrade_failed(self) -> dict[str, str]:
        """Nodes whose upgrade failed (kept drained), with why, as the rollout ended."""
        upgrade = self.upgrade or {}
        nodes = upgrade.get("nodes") or {}
        return {n: str((nodes.get(n) or {}).get("reason") or "failed") for n in upgrade.get("failed") or []}

    def as_dict(self) -> dict[str, Any]:
        """For the store, `reconciler status` and the status page."""
        out = {"status": self.status, "commit": self.commit, "previous": self.previous,
               "waves": self.waves.as_dict(), "timeline": self.timeline, "failed_wave": self.failed_wave,
               "failed_gate": self.failed_gate, "rollback": self.rollback, "reason": self.reason}
        return out if self.upgrade is None else {**out, "upgrade": self.upgrade}


class RolloutRunner:
    """One commit's rollout over a transport the caller owns (never closed here)."""

    def __init__(self, new: LoadedState, old: LoadedState | None, transport: Transport, options: ApplyOptions,
                 journal: Journal, site: RolloutSite, log: Log = lambda _: None,
                 on_event: Callable[[str, dict[str, Any]], None] = lambda kind, data: None,
                 admissions: Sequence[Admission] = (), operator: Desk | None = None) -> None:
        self.new, self.old, self.transport, self.options = new, old, transport, options
        # asked before the upgrade machine takes each node out (admission.py): the operator's pause, then the
        # caller's policies; the operator's skips and retries go to the machine (operator.py)
        self.operator = operator
        self.admissions = ([PauseAdmission(operator)] if operator else []) + list(admissions)
        self.journal, self.log, self.on_event = journal, log, on_event
        # what the rollout needs of the cluster (drivers, workload manager, gates, upgrade hooks): its callers' word
        self.site, self.workload = site, site.workload
        self.gates = site.gates(new, transport, options.should_stop, log)
        self.pending: list[FollowUp] = []  # follow-ups a killed process journaled and did not run
        # rollout.upgrade: changes needing a reboot/driver reload are held by the waves' apply and go through the
        # upgrade machine node by node (reconciler/rollout/upgrade.py) instead of being reported held
        self.upgrade = new.state.rollout.upgrade
        self.wave_options = replace(options, allow=frozenset()) if self.upgrade else options

    # ------------------------------------------------------------ planning

    def waves(self, plan: Plan, before: NodesView) -> WavePlan:
        """The waves of PLAN (one ungated wave while Slurm is being built)."""
        state = self.new.state
        scheduled = self.workload.scheduled(state)
        return plan_waves(plan, state.rollout, list(self.gates_order()), scheduled,
                          has_node_checks=bool(state.checks.node), bootstrap=bootstrap_reason(before, scheduled))

    def gates_order(self) -> list[str]:
        """Inventory order of the new state's nodes."""
        from reconciler.desired.inventory import node_specs

        return list(node_specs(self.new.state))

    # ------------------------------------------------------------ running

    def run(self, plan: Plan) -> RolloutResult:
        """Roll PLAN (of the whole new state) out wave by wave."""
        before = self.gates.view()
        waves = self.waves(plan, before)
        record = RolloutJournal(commit=self.new.commit, previous=self.old.commit if self.old else None,
                                waves=waves.as_dict(), started=time.time(), before=_view_dump(before))
        self.journal.save(record)
        self.on_event("started", {"commit": record.commit, "previous": record.previous, "waves": record.waves})
        return self._from(record, waves, before, 0)

    def resume(self, record: RolloutJournal) -> RolloutResult:
        """Finish or roll back a rollout a killed process left in RECORD (the journal)."""
        waves = record.wave_plan()
        before = _view_load(record.before, self.workload)
        self.pending = list(record.pending_followups or [])
        if waves.mode == "retry":  # daemon/loop_retry.py: no restart, the operator's retry after the rollout ended
            self.log(f"rollout: retrying {hostlist.compress([n for w in waves.waves for n in w.nodes])} of commit "
                     f"{str(record.commit)[:12]} (`reconciler upgrade retry` after its rollout ended)")
        else:
            self.log(f"rollout: resuming {record.phase.value} of wave {record.wave + 1} "
                     f"of commit {str(record.commit)[:12]} after a restart")
        if record.phase == Phase.ROLLING_BACK:
            failed = record.failed_gate or {"gate": "restart", "message": "interrupted rollback"}
            return self._roll_back(record, waves, before, record.failed_wave or 1, failed)
        return self._from(record, waves, before, record.wave)

    def _from(self, record: RolloutJournal, waves: WavePlan, before: NodesView, start: int) -> RolloutResult:
        result = RolloutResult("complete", self.new.commit, record.previous, waves, timeline=list(record.timeline))
        for index in range(start, len(waves.waves)):
            wave = waves.waves[index]
            if self.options.should_stop():
                result.status = "stopped"
                return result
            record.wave, record.phase = index, Phase.APPLYING
            self.journal.save(record)
            entry: dict[str, Any] = {"wave": wave.index, "name": wave.name, "nodes": wave.nodeset,
                                     "started": time.time(), "gates": []}
            self.log(f"rollout: wave {wave.index}/{len(waves.waves)} ({wave.name}): applying to {wave.nodeset}")
            self.on_event("wave", {"wave": wave.index, "waves": len(waves.waves), "name": wave.name,
                                   "nodes": wave.nodeset, "commit": self.new.commit})
            failpoint("wave.before-apply")
            # a node a killed process left mid-upgrade (rebooting, validating...) is the machine's to finish: a plain
            # apply would see it down, fail its restarts and end the rollout with the node's record lost
            upgrading = record.mid_upgrade()
            applied = self._apply(self.new, [n for n in wave.nodes if n not in upgrading], record)
            failpoint("wave.after-apply")
            result.applied += applied.applied
            result.held += [] if self.upgrade else applied.held
            result.steps += applied.steps
            for node, messages in applied.failures.items():
                result.failures.setdefault(node, []).extend(messages)
            entry.update(applied_at=time.time(), changes=len(applied.applied))
            failed: GateResult | None = None
            if applied.failures or applied.stopped:
                if applied.stopped and self.options.should_stop():
                    result.status = "stopped"
                    entry["ended"] = time.time()
                    record.timeline = result.timeline + [entry]
                    self.journal.save(record)
                    return result
                problems = [f"{n}: {m}" for n, ms in sorted(applied.failures.items()) for m in ms]
                failed = GateResult("apply", False, "; ".join(problems + ([applied.stopped] if applied.stopped
                                                                           else []))[:500],
                                    sorted(applied.failures), failed=applied.failed[:MAX_FAILED])
            gated_nodes = wave.nodes
            if failed is None and self.upgrade is not None:
                failed, out = self._upgrade(sorted({c.node for c in applied.held}), record, entry)
                gated_nodes = [n for n in wave.nodes if n not in out]
            if failed is None and wave.gated:
                record.phase = Phase.GATING
                self.journal.save(record)
                failpoint("wave.before-gates")
                for name in waves.gates:
                    gate = self.gates.run(name, gated_nodes, before)
                    entry["gates"].append(gate.as_dict())
                    self.log(f"rollout: wave {wave.index} gate {name}: {'passed' if gate.ok else 'FAILED'}"
                             f" ({gate.message})")
                    if not gate.ok:
                        failed = gate
                        break
            if failed is None and wave.gated and waves.soak and index < len(waves.waves) - 1:
                record.phase = Phase.SOAKING
                self.journal.save(record)
                soak = self.gates.soak(wave.nodes, before, waves.soak)
                entry["soak"] = soak.as_dict()
                if not soak.ok:
                    failed = soak
            entry["ended"] = time.time()
            entry["ok"] = failed is None
            result.timeline.append(entry)
            record.timeline = result.timeline
            if failed is not None and not wave.gated:  # one shot (waves: all, bootstrap): fails as it always did
                result.status, result.failed_wave, result.failed_gate = "failed", wave.index, failed.as_dict()
                result.upgrade = record.final_upgrade()
                self.journal.clear()
                return result
            if failed is not None:
                record.failed_wave, record.failed_gate = wave.index, failed.as_dict()
                return self._roll_back(record, waves, before, wave.index, failed.as_dict(), result)
            self.journal.save(record)
        result.upgrade = record.final_upgrade()
        self.journal.clear()
        self.on_event("finished", result.as_dict())
        return result

    def _apply(self, loaded: LoadedState, nodes: list[str], record: RolloutJournal) -> ApplyResult:
        """Plan LOADED against NODES (fresh facts) and apply it; its follow-ups are journaled first (a crash
        after the files are written must still run the restarts they asked for)."""
        if not nodes:  # an empty limit would mean every node
            return ApplyResult()
        run = open_reconcile(loaded, self.site.drivers, limit=hostlist.compress(nodes), transport=self.transport)
        run.gather()
        plan = run.plan()
        carry_over(run.ctx, plan, self.pending)
        self.pending = []
        if not plan.has_changes:
            return ApplyResult()
        if self.old is None and loaded is self.new:  # nothing to go back to but what these facts show
            image = record.before_image or BeforeImage()
            image.add(capture(run.ctx, plan))
            record.before_image = image
        held: list[Change] = []
        if self.upgrade is not None and loaded is self.new:
            # the upgrade machine applies these node by node: left out here, so no "held: --allow" line claims them
            held = [c for c in plan.changing() if c.needs is not None]
            plan = plan.model_copy(update={"changes": [c for c in plan.changes
                                                       if not any(c is h for h in held)]})
        record.pending_followups = list(plan.followups)
        self.journal.save(record)
        result = run.apply(plan, self.wave_options, log=self.log)
        result.held += held
        record.pending_followups = None
        self.journal.save(record)
        return result

    # ------------------------------------------------------------ upgrades (reboot, driver reload)

    def _machine(self, record: RolloutJournal) -> UpgradeMachine:
        assert self.upgrade is not None
        hooks = self.site.hooks(self.new, self.upgrade, self.transport, self.options, self.gates, self.log)
        windows = WindowAdmission(self.new.state.rollout.windows)
        capacity = CapacityAdmission(capacity_of(self.new.state, self.upgrade, self.workload.scheduled(self.new.state)),
                                     self.gates.view, max_age=max(1.0, self.options.poll_interval))
        admission = Admissions([*self.admissions, windows, capacity])
        return UpgradeMachine(self.upgrade, hooks, self.transport, dict(node_specs(self.new.state)), self.journal,
                              record, self.log, self.options.should_stop, self.options.poll_interval, admission,
                              self.operator)

    def _upgrade(self, held: list[str], record: RolloutJournal,
                 entry: dict[str, Any]) -> tuple[GateResult | None, set[str]]:
        """The wave's nodes whose changes need a reboot/driver reload (and any a killed process left in flight)
        through the upgrade machine; a failed gate past the failure budget, and the nodes left out of the gates."""
        machine = self._machine(record)
        # and the failed nodes the operator asked to retry (no change of theirs is held: it went in before they failed)
        nodes = held + [n for n in [*machine.in_flight(), *machine.operator.requests().retry] if n not in held]
        if not nodes:
            return None, set()
        self.log(f"rollout: upgrading {hostlist.compress(nodes)} node by node "
                 f"(max_unavailable {self.upgrade.max_unavailable if self.upgrade else 1})")
        outcome = machine.run(nodes)
        entry["upgrade"] = {"done": outcome.done, "failed": outcome.failed, "skipped": outcome.skipped,
                            "rolled_back": outcome.rolled_back, "rollback_errors": outcome.rollback_errors}
        out = set(outcome.failed) | set(outcome.skipped)
        if outcome.stopped:
            return GateResult("upgrade", False, "stop requested during the upgrade", sorted(out)), out
        if outcome.over_budget:
            return GateResult("upgrade", False, outcome.message, sorted(outcome.failed)), out
        return None, out

    # ------------------------------------------------------------ rolling back

    def _roll_back(self, record: RolloutJournal, waves: WavePlan, before: NodesView, failed_wave: int,
                   gate: dict[str, Any], result: RolloutResult | None = None) -> RolloutResult:
        """Put every node the commit reached back on the previous state, then resume the drains it caused."""
        result = result or RolloutResult("rolled-back", self.new.commit, record.previous, waves,
                                         timeline=list(record.timeline))
        result.failed_wave, result.failed_gate = failed_wave, gate
        reached = [n for w in waves.waves if w.index <= failed_wave for n in w.nodes]
        record.phase, record.failed_wave, record.failed_gate = Phase.ROLLING_BACK, failed_wave, gate
        record.timeline = result.timeline
        self.journal.save(record)
        self.on_event("failed", result.as_dict())
        started = time.time()
        upgrade_errors: list[str] = []
        if self.upgrade is not None and record.upgrade is not None and record.upgrade.work:
            # a downgrade and a reboot: the plain apply would hold it; a node whose rollback failed is named
            _, failed = self._machine(record).roll_back(reached)
            upgrade_errors = [f"{n}: {why}" for n, why in sorted(failed.items())]
        if self.old is None:
            return self._restore(record, reached, before, gate, result, started, upgrade_errors)
        to = f"commit {str(self.old.commit)[:12]}" if self.old.commit else "the --previous state"
        self.log(f"rollout: rolling back {hostlist.compress(reached)} to {to}")
        failpoint("rollback.before-apply")
        undone = self._apply(self.old, reached, record)
        failpoint("rollback.after-apply")
        resumed = self._resume_drains(reached, before, gate)
        errors = upgrade_errors + [f"{n}: {m}" for n, ms in sorted(undone.failures.items()) for m in ms]
        result.rollback = {"ok": not errors, "nodes": hostlist.compress(reached), "to": self.old.commit,
                           "changes": len(undone.applied), "resumed": resumed, "errors": errors,
                           "left_drained": record.left_drained(), "started": started, "ended": time.time()}
        result.status = "rolled-back" if not errors else "rollback-failed"
        result.upgrade = record.final_upgrade()
        self.journal.clear()
        self.on_event("rolled-back", result.as_dict())
        return result

    def _restore(self, record: RolloutJournal, reached: list[str], before: NodesView, gate: dict[str, Any],
                 result: RolloutResult, started: float, upgrade_errors: list[str]) -> RolloutResult:
        """No previous commit: put what the commit changed on REACHED back to the before-images its plans read
        (reconciler/engine/restore.py), then resume the drains it caused; the record says what was restored."""
        image = record.before_image or BeforeImage()
        nodes = hostlist.compress(reached)
        self.log(f"rollout: no previous commit: restoring {nodes} to the state the apply found")
        failpoint("rollback.before-apply")
        # A process killed from here on may have restored some resources: found as before after a restart, they
        # are not said to be ones the change never reached.
        again = record.restoring
        record.restoring = True
        self.journal.save(record)
        run = open_reconcile(self.new, self.site.drivers, limit=nodes, transport=self.transport)
        run.gather()
        report = restore(run.ctx, image, self.transport, self.options, self.log)
        failpoint("rollback.after-apply")
        resumed = self._resume_drains(reached, before, gate)
        errors = upgrade_errors + [f"{n}: not restored: {m}" for n, ms in sorted(report.not_restored.items())
                                   for m in ms]
        result.rollback = {"ok": report.ok and not upgrade_errors, "nodes": nodes, "to": None, "before_image": True,
                           **report.as_dict(), "after_restart": again,
                           "changes": sum(len(v) for v in report.restored.values()), "resumed": resumed,
                           "errors": errors, "upgrade_errors": upgrade_errors, "left_drained": record.left_drained(),
                           "started": started, "ended": time.time()}
        result.status = "rolled-back" if result.rollback["ok"] else "rollback-failed"
        result.upgrade = record.final_upgrade()
        self.journal.clear()
        self.on_event("rolled-back", result.as_dict())
        return result

    def _resume_drains(self, nodes: list[str], before: NodesView, gate: dict[str, Any]) -> list[str]:
        """Resume the nodes the bad commit got drained: by Slurm for a prolog/epilog error, or by us; never
        a drain that was there before the rollout or that anyone else set. Slurm records a failed job's drains
        node by node, so a pass that resumed some looks again after LATE_DRAINS seconds for ones set since."""
        resumed: list[str] = []
        for attempt in range(3):
            if attempt:
                time.sleep(LATE_DRAINS)
            now = self.gates.view()
            if now.error:
                self.log(f"rollout: cannot read Slurm's view to resume drains: {now.error}")
                return resumed
            found = [(n, r) for n, r in sorted(new_drains(before, now, nodes).items())
                     if n not in resumed and self.workload.resumable(r)]
            if not found:
                return resumed
            for node, reason in found:
                why = self.workload.resume(self.transport, self.new.state, node)
                if why is None:
                    resumed.append(node)
                    self.log(f"rollout: resumed {node} (drained during the rollout: {reason})")
                else:
                    self.log(f"rollout: could not resume {node}: {why}")
        return resumed


def _view_dump(view: NodesView) -> SeenBefore:
    """The node states and reasons of a view, for the journal (what was drained before the rollout)."""
    return SeenBefore(error=view.error,
                      nodes={n: SeenNode(state=f.state, reason=f.reason) for n, f in view.nodes.items()})


def _view_load(seen: SeenBefore, workload: WorkloadManager) -> NodesView:
    """The inverse of _view_dump (WORKLOAD reads each kept state and reason)."""
    return NodesView(nodes={n: workload.status(v.state, v.reason) for n, v in seen.nodes.items()}, error=seen.error)
