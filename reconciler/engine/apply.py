"""Apply a plan in phases: each phase's changes, then the follow-up steps that phase's changes asked for."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from reconciler.common.failpoints import failpoint
from reconciler.engine.context import Context
from reconciler.engine.drain import DrainFailed, DrainSteps, NodeDrain, wait_until
from reconciler.engine.followups import FollowUp, waves
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.owed_ledger import OwedLedger
from reconciler.engine.plan import NEEDS_TEXT, Change, Plan
from reconciler.engine.remote_write import WRITE_COMMAND, write_request
from reconciler.facts.services import control_command
from reconciler.transport.base import Transport

Log = Callable[[str], None]


@dataclass
class ApplyOptions:
    """Knobs of a rollout."""

    max_unavailable: int = 1
    max_fail_percent: float = 50.0
    drain_timeout: float = 3600.0
    responding_timeout: float = 90.0
    poll_interval: float = 1.0
    should_stop: Callable[[], bool] = lambda: False
    # {"epoch": N, "holder": NAME}: every file write carries it, and a node that saw a higher epoch refuses it
    fence: dict[str, object] | None = None
    # consequences (Change.needs) the caller accepts: a change needing another one is held, never applied
    allow: frozenset[str] = frozenset()


@dataclass
class ApplyResult:
    """What happened: applied changes, failures per node, follow-up steps taken."""

    applied: list[Change] = field(default_factory=list)
    failures: dict[str, list[str]] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)
    stopped: str | None = None
    failed: list[dict[str, str]] = field(default_factory=list)  # each failed change: what it was and its error
    owed: list[str] = field(default_factory=list)  # follow-ups left undone, kept on a node for the next apply
    held: list[Change] = field(default_factory=list)  # changes needing a reboot/driver reload not allowed

    @property
    def ok(self) -> bool:
        """True when nothing failed and the rollout was not stopped."""
        return not self.failures and self.stopped is None

    def fail(self, node: str, message: str) -> None:
        """Record a failure on a node."""
        self.failures.setdefault(node, []).append(message)

    def fail_change(self, change: Change, message: str) -> None:
        """Record the failure of CHANGE: the node's failure, and which resource failed (for a rollout's record)."""
        self.fail(change.node, message)
        self.failed.append({"node": change.node, "driver": change.driver, "resource": change.resource,
                            "summary": change.summary, "error": message})


class Applier:
    """Carries out a plan's operations over a transport."""

    def __init__(self, ctx: Context, transport: Transport, options: ApplyOptions, log: Log) -> None:
        self.ctx, self.transport, self.options, self.log = ctx, transport, options, log
        self.result = ApplyResult()
        self.done: set[str] = set()  # keys of the follow-ups that ran

    def run(self, plan: Plan) -> ApplyResult:
        """Apply every changing resource phase by phase; after each phase, the follow-ups it asked for. The
        follow-ups are recorded as owed on the nodes first and struck off once done (engine/owed_ledger.py)."""
        for change in plan.changing():
            if change.needs is not None and change.needs not in self.options.allow:
                self.result.held.append(change)
                self.log(f"{change.node}: held, not applied: {change.summary or change.resource} "
                         f"({held_reason(change)})")
        ledger = OwedLedger(self.ctx, self.transport, plan.followups, self.options.fence, self.log)
        if plan.followups:
            ledger.record()
        try:
            self._phases(plan)
        finally:
            if ledger.nodes:
                self.result.owed = ledger.settle(self.done, self.result.failures, self.result.stopped)
                for line in self.result.owed:
                    self.log(line)
        return self.result

    def _phases(self, plan: Plan) -> None:
        phases = sorted({c.phase for c in plan.changing()} | {f.phase for f in plan.followups})
        for phase in phases:
            if self.options.should_stop():
                self.result.stopped = "stop requested"
                break
            held = {id(c) for c in self.result.held}
            self._phase([c for c in plan.changing() if c.phase == phase and id(c) not in held])
            for wave in waves(plan.followups, phase):
                if self.result.stopped:
                    break
                self._wave(wave)
            if self.result.stopped:
                break
            if self._too_many_failures():
                self.result.stopped = (f"stopped after phase {phase}: {len(self.result.failures)} node(s) failed "
                                       f"(max {self.options.max_fail_percent:.0f}%)")
                break

    def _too_many_failures(self) -> bool:
        total = max(1, len(self.ctx.targets()))
        return 100.0 * len(self.result.failures) / total > self.options.max_fail_percent

    # ------------------------------------------------------------ files and commands

    def _phase(self, changes: list[Change]) -> None:
        by_node: dict[str, list[Change]] = {}
        for change in changes:
            if change.node in self.result.failures and change.run_on is None:
                continue  # an earlier phase failed on this node: leave the rest of it alone
            by_node.setdefault(change.run_on or change.node, []).append(change)
        forks = max(1, min(len(by_node), self.ctx.state.ssh.forks))
        with ThreadPoolExecutor(max_workers=forks) as pool:
            list(pool.map(lambda item: self._node_changes(*item), by_node.items()))

    def _node_changes(self, host: str, changes: list[Change]) -> None:
        spec = self.ctx.specs[host]
        writes = [(c, op) for c in changes for op in c.ops if isinstance(op, WriteFile)]
        if writes:
            result = self.transport.run(spec, WRITE_COMMAND, stdin=write_request([op for _, op in writes],
                                                                                self.options.fence))
            outcomes = self._write_outcomes(result.stdout, len(writes)) if result.ok else None
            for index, (change, op) in enumerate(writes):
                if outcomes is None:
                    self.result.fail_change(change, f"{op.path}: {result.error or result.stderr.strip()[-300:]}")
                elif not outcomes[index].get("ok"):
                    self.result.fail_change(change, f"{op.path}: {outcomes[index].get('error')}")
        for change in changes:
            if change.node in self.result.failures and any(isinstance(o, WriteFile) for o in change.ops):
                continue
            for step in change.ops:
                if isinstance(step, RunCommand) and not self._command(spec.name, change.node, step, change):
                    break
            else:
                if change.node not in self.result.failures:
                    self.result.applied.append(change)
                    self.log(f"{change.node}: {change.summary or change.action + ' ' + change.resource}")

    @staticmethod
    def _write_outcomes(stdout: str, count: int) -> list[dict] | None:
        try:
            outcomes = json.loads(stdout)
        except ValueError:
            return None
        return outcomes if isinstance(outcomes, list) and len(outcomes) == count else None

    def _command(self, host: str, node: str, op: RunCommand, change: Change | None = None) -> bool:
        result = self.transport.run(self.ctx.specs[host], op.command, timeout=op.timeout)
        if result.ok and op.description:  # tests: `op.<description slug>=sleep(N)` pauses after that step
            failpoint("op." + re.sub(r"[^a-z0-9.]+", "-", op.description.lower()).strip("-.")[:80])
        if not result.ok:
            detail = result.error or (result.stderr or result.stdout).strip()[-300:]
            message = f"{op.description or op.command}: {detail}"
            if change is None:
                self.result.fail(node, message)
            else:
                self.result.fail_change(change, message)
        return result.ok

    # ------------------------------------------------------------ follow-ups

    def _run_on(self, host: str, command: str) -> tuple[bool, str]:
        result = self.transport.run(self.ctx.specs[host], command)
        return result.ok, (result.stdout if result.ok else (result.error or result.stderr))

    def _wave(self, wave: list[FollowUp]) -> None:
        """One order's steps: plain ones in parallel, rolling ones a batch at a time."""
        live = [f for f in wave if f.node not in self.result.failures and f.host not in self.result.failures]
        plain = [f for f in live if not f.rolling]
        if plain:
            forks = max(1, min(len(plain), self.ctx.state.ssh.forks))
            with ThreadPoolExecutor(max_workers=forks) as pool:
                list(pool.map(self._followup, plain))
        rolling = [f for f in live if f.rolling]
        batch = max(1, self.options.max_unavailable)
        for start in range(0, len(rolling), batch):
            if self.options.should_stop():
                self.result.stopped = f"stop requested during the rolling {rolling[0].title()}"
                return
            group = rolling[start:start + batch]
            with ThreadPoolExecutor(max_workers=len(group)) as pool:
                list(pool.map(self._rolling, group))

    def _action(self, step: FollowUp) -> tuple[str, str]:
        """The command and its label: a restart of a service that does not run is a start."""
        facts = self.ctx.facts.nodes.get(step.node)
        if step.kind == "command":
            label = step.label or step.target
            unit = facts.services.get(step.service) if facts and step.service else None
            if step.service and unit is not None and not unit.running:  # a reconfigure cannot reach a dead daemon
                manager = self.ctx.specs[step.node].service_manager
                return (control_command(manager, "start", step.service),
                        f"start {step.service} (not running: instead of `{label}`)")
            return step.target, label
        kind = step.kind
        unit = facts.services.get(step.target) if facts else None
        if kind == "restart" and unit is not None and not unit.running:
            kind = "start"
        manager = self.ctx.specs[step.node].service_manager
        return control_command(manager, kind, step.target), f"{kind} {step.label or step.target}"

    def _followup(self, step: FollowUp) -> bool:
        """Run one step and wait until its service answers again; where it would end the jobs of other nodes
        (`protect`), those nodes are drained and emptied first and resumed after it."""
        kept = self._protect(step) if step.protect else []
        if kept is None:
            return False
        try:
            cmd, label = self._action(step)
            if not self._step(step.host, step.node, cmd, label):
                return False
            if step.ready and not self._ready(step, label):
                return False
            self.done.add(step.key)
            return True
        finally:
            self._resume_all(kept)

    def _drainer(self, node: str, steps: DrainSteps) -> NodeDrain:
        return NodeDrain(node, steps, self._run_on, self.options.poll_interval, self.options.should_stop)

    def _protect(self, step: FollowUp) -> list[NodeDrain] | None:
        """Before a step that would end the jobs running on the nodes of `step.protect`: drain those that run
        jobs now and wait until they have none, then drain the others too (a job that started there meanwhile is
        waited for as well), all within drain_timeout. A node someone else drained is waited for, never
        resumed. Returns the drains made here (the caller resumes them after the step); None when the step must
        not run (its nodes resumed, the step left owed)."""
        nodes = [self._drainer(node, steps) for node, steps in sorted(step.protect.items())]
        deadline = time.monotonic() + self.options.drain_timeout
        mine: list[NodeDrain] = []
        busy = [n for n in nodes if n.jobs() != 0]
        for group in (busy, [n for n in nodes if n not in busy]):
            for node in group:
                held = self._hold(node)
                if held is None:
                    self._resume_all(mine)
                    return None
                if held:
                    mine.append(node)
            left = [n for n in group if n.jobs() != 0]
            if left:
                self.log(f"{', '.join(n.node for n in left)}: waiting for running jobs to finish before: "
                         f"{step.title()} on {step.node} (it would end them)")
            if not all(n.wait_jobs(max(0.0, deadline - time.monotonic())) for n in left):
                if self.options.should_stop():
                    self.result.stopped = f"stop requested while waiting for jobs before {step.title()}"
                else:
                    running = [n.node for n in left if n.jobs() != 0]
                    self.result.fail(step.node, f"jobs still running on {', '.join(running)} after "
                                                f"{self.options.drain_timeout:.0f}s; not done: {step.title()} "
                                                "(it would end them); left for the next apply")
                self._resume_all(mine)
                return None
        return mine

    def _resume_all(self, mine: list[NodeDrain]) -> None:
        for node in mine:
            self._resume(node)

    def _hold(self, node: NodeDrain) -> bool | None:
        """Drain NODE unless someone did (engine/drain.py): True when drained here, None when the drain failed."""
        try:
            mine = node.hold()
        except DrainFailed as exc:
            self.result.fail(node.node, f"drain {node.node}: {exc}")
            return None
        if mine:
            self.result.steps.append(f"{node.steps.run_on}: drain {node.node}")
            self.log(f"{node.steps.run_on}: drain {node.node}")
        return mine

    def _resume(self, node: NodeDrain) -> None:
        """Resume a drain made here; a refused resume is tried again within responding_timeout (engine/drain.py:
        right after a controller restart Slurm refuses it yet clears the drain)."""
        label = f"resume {node.node}"
        why = node.resume(self.options.responding_timeout)
        if why is None:
            self.result.steps.append(f"{node.steps.run_on}: {label}")
            self.log(f"{node.steps.run_on}: {label}")
        else:
            self.result.fail(node.node, f"{label}: {why}")

    def _ready(self, step: FollowUp, label: str) -> bool:
        """Wait until the step's service answers (`ready`), or until `gone` says it never will; a failure
        carries the last thing `ready` printed (why the service is not up)."""
        ready_on = step.ready_on or step.host
        said = {"why": "", "gone": False}

        def ready() -> bool:
            ok, out = self._run_on(ready_on, step.ready or "true")
            said["why"] = "" if ok else " ".join(out.split())[-300:]
            if not ok and step.gone:
                said["gone"] = self._run_on(ready_on, step.gone)[0]
            return ok

        if wait_until(ready, self.options.responding_timeout, lambda: bool(said["gone"]), self.options.poll_interval):
            return True
        waited = ("stopped (its service manager gave it up)" if said["gone"]
                  else f"not ready after {self.options.responding_timeout:.0f}s")
        self.result.fail(step.node, f"{label} on {step.node}: {waited}" + (f": {said['why']}" if said["why"] else ""))
        return False

    def _rolling(self, step: FollowUp) -> None:
        """Drain first when jobs run (unless someone drained the node already), wait them out, run the step,
        resume what we drained."""
        drained_by_us = False
        node = self._drainer(step.node, step.drain) if step.drain is not None else None
        if node is not None and (node.jobs() or step.jobs):
            held = self._hold(node)
            if held is None:
                return
            drained_by_us = held
            self.log(f"{step.node}: waiting for running jobs to finish before: {step.title()}")
            if not node.wait_jobs(self.options.drain_timeout):
                if self.options.should_stop():
                    self.result.stopped = (f"stop requested while waiting for jobs on {step.node} "
                                           "(node left drained)")
                    return
                self.result.fail(step.node, f"jobs still running after {self.options.drain_timeout:.0f}s; "
                                            f"not done: {step.title()} (node left drained)")
                return
        if self._followup(step) and drained_by_us and node is not None:
            self._resume(node)

    def _step(self, host: str, node: str, command: str, label: str) -> bool:
        ok = self._command(host, node, RunCommand(command=command, description=label))
        if ok:
            self.result.steps.append(f"{host}: {label}")
            self.log(f"{host}: {label}")
        return ok


def held_reason(change: Change) -> str:
    """Why a change was held: what it needs and the flag that allows it."""
    needs = change.needs or ""
    return f"{NEEDS_TEXT.get(needs, needs)}: apply with --allow {needs}"


def apply_plan(ctx: Context, plan: Plan, transport: Transport, options: ApplyOptions | None = None,
               log: Log = lambda _: None) -> ApplyResult:
    """Apply a plan; one failing node does not stop the others unless max_fail_percent is passed."""
    return Applier(ctx, transport, options or ApplyOptions(), log).run(plan)
