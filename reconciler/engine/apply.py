"""Apply a plan in phases: exports, mounts, Slurm files and restarts, patches, images, node states."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from drivers.node_state import ROLLOUT_REASON, drain_command, resume_command
from reconciler.backend.base import Transport
from reconciler.engine.context import Context
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.plan import Change, Plan
from reconciler.engine.remote_write import WRITE_COMMAND, write_request
from reconciler.facts.parsers import SQUEUE_FORMAT, parse_scontrol_nodes, parse_squeue
from reconciler.services import control_command

SLURM_PHASE = 30

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


@dataclass
class ApplyResult:
    """What happened: applied changes, failures per node, Slurm steps taken."""

    applied: list[Change] = field(default_factory=list)
    failures: dict[str, list[str]] = field(default_factory=dict)
    slurm_steps: list[str] = field(default_factory=list)
    stopped: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing failed and the rollout was not stopped."""
        return not self.failures and self.stopped is None

    def fail(self, node: str, message: str) -> None:
        """Record a failure on a node."""
        self.failures.setdefault(node, []).append(message)


class Applier:
    """Carries out a plan's operations over a transport."""

    def __init__(self, ctx: Context, transport: Transport, options: ApplyOptions, log: Log) -> None:
        self.ctx, self.transport, self.options, self.log = ctx, transport, options, log
        self.result = ApplyResult()

    def run(self, plan: Plan) -> ApplyResult:
        """Apply every changing resource, phase by phase, then the Slurm actions after the config phase."""
        phases = sorted({c.phase for c in plan.changing()} | ({SLURM_PHASE} if plan.slurm.any else set()))
        for phase in phases:
            if self.options.should_stop():
                self.result.stopped = "stop requested"
                break
            self._phase([c for c in plan.changing() if c.phase == phase])
            if phase == SLURM_PHASE and plan.slurm.any:
                self._slurm(plan)
            if self._too_many_failures():
                self.result.stopped = (f"stopped after phase {phase}: {len(self.result.failures)} node(s) failed "
                                       f"(max {self.options.max_fail_percent:.0f}%)")
                break
        return self.result

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
            result = self.transport.run(spec, WRITE_COMMAND, stdin=write_request([op for _, op in writes]))
            outcomes = self._write_outcomes(result.stdout, len(writes)) if result.ok else None
            for index, (change, op) in enumerate(writes):
                if outcomes is None:
                    self.result.fail(change.node, f"{op.path}: {result.error or result.stderr.strip()[-300:]}")
                elif not outcomes[index].get("ok"):
                    self.result.fail(change.node, f"{op.path}: {outcomes[index].get('error')}")
        for change in changes:
            if change.node in self.result.failures and any(isinstance(o, WriteFile) for o in change.ops):
                continue
            for step in change.ops:
                if isinstance(step, RunCommand) and not self._command(spec.name, change.node, step):
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

    def _command(self, host: str, node: str, op: RunCommand) -> bool:
        result = self.transport.run(self.ctx.specs[host], op.command)
        if not result.ok:
            detail = result.error or (result.stderr or result.stdout).strip()[-300:]
            self.result.fail(node, f"{op.description or op.command}: {detail}")
        return result.ok

    # ------------------------------------------------------------ slurm

    def _ctl(self, command: str) -> tuple[bool, str]:
        result = self.transport.run(self.ctx.specs[self.ctx.controller], command)
        return result.ok, (result.stdout if result.ok else (result.error or result.stderr))

    def _slurm(self, plan: Plan) -> None:
        actions = plan.slurm
        ctl_spec = self.ctx.specs[self.ctx.controller]
        ctl_facts = self.ctx.facts.nodes.get(ctl_spec.name)
        if actions.restart_slurmctld:
            running = ctl_facts is not None and ctl_facts.services.get("slurmctld") is not None \
                and ctl_facts.services["slurmctld"].running
            cmd = control_command(ctl_spec.service_manager, "restart" if running else "start", "slurmctld")
            self._step(ctl_spec.name, cmd, "restart slurmctld" if running else "start slurmctld")
            self._wait(lambda: _ping_up(*self._ctl("scontrol ping")),
                       self.options.responding_timeout)
        elif actions.reconfigure:
            self._step(ctl_spec.name, "scontrol reconfigure", "scontrol reconfigure")
        nodes = [n for n in actions.restart_slurmd if n not in self.result.failures]
        batch = max(1, self.options.max_unavailable)
        for start in range(0, len(nodes), batch):
            if self.options.should_stop():
                self.result.stopped = "stop requested during the slurmd rollout"
                return
            group = nodes[start:start + batch]
            with ThreadPoolExecutor(max_workers=len(group)) as pool:
                list(pool.map(lambda node: self._restart_slurmd(node, bool(actions.drain_first.get(node))), group))

    def _step(self, host: str, command: str, label: str) -> bool:
        ok = self._command(host, host, RunCommand(command=command, description=label))
        if ok:
            self.result.slurm_steps.append(f"{host}: {label}")
            self.log(f"{host}: {label}")
        return ok

    def _node_state(self, node: str) -> str:
        ok, out = self._ctl(f"scontrol show node -o {shlex.quote(node)}")
        fact = parse_scontrol_nodes(out).get(node) if ok else None
        return fact.state if fact else "UNKNOWN"

    def _job_count(self, node: str) -> int:
        _, out = self._ctl(f"squeue -h -w {shlex.quote(node)} -t RUNNING,COMPLETING,CONFIGURING -o '{SQUEUE_FORMAT}'")
        return len(parse_squeue(out))

    def _restart_slurmd(self, node: str, has_jobs: bool) -> None:
        spec = self.ctx.specs[node]
        state, jobs = self._node_state(node), self._job_count(node)
        drained_by_us = False
        if jobs or has_jobs:
            if "DRAIN" not in state:
                if not self._step(self.ctx.controller, drain_command(node, ROLLOUT_REASON), f"drain {node}"):
                    return
                drained_by_us = True
            self.log(f"{node}: waiting for running jobs to finish before restarting slurmd")
            if not self._wait(lambda: self._job_count(node) == 0, self.options.drain_timeout, stoppable=True):
                if self.options.should_stop():
                    self.result.stopped = f"stop requested while waiting for jobs on {node} (node left drained)"
                    return
                self.result.fail(node, f"jobs still running after {self.options.drain_timeout:.0f}s; "
                                       "slurmd not restarted (node left drained)")
                return
        facts = self.ctx.facts.nodes.get(node)
        running = bool(facts and facts.services.get("slurmd") and facts.services["slurmd"].running)
        cmd = control_command(spec.service_manager, "restart" if running else "start", "slurmd")
        if not self._step(node, cmd, "restart slurmd" if running else "start slurmd"):
            return
        if not self._wait(lambda: _responding(self._node_state(node)), self.options.responding_timeout):
            self.result.fail(node, f"slurmd on {node} not responding to slurmctld after restart")
            return
        if drained_by_us:
            self._step(self.ctx.controller, resume_command(node), f"resume {node}")

    def _wait(self, condition: Callable[[], bool], timeout: float, stoppable: bool = False) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            if stoppable and self.options.should_stop():
                return False
            time.sleep(self.options.poll_interval)
        return condition()


def _ping_up(ok: bool, output: str) -> bool:
    return ok and "UP" in output


def _responding(state: str) -> bool:
    flags = set(state.replace("*", "+NOT_RESPONDING").split("+"))
    return not flags & {"NOT_RESPONDING", "DOWN", "UNKNOWN", "FUTURE", "INVAL"}


def apply_plan(ctx: Context, plan: Plan, transport: Transport, options: ApplyOptions | None = None,
               log: Log = lambda _: None) -> ApplyResult:
    """Apply a plan; one failing node does not stop the others unless max_fail_percent is passed."""
    return Applier(ctx, transport, options or ApplyOptions(), log).run(plan)
