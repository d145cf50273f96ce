"""The gates after a wave: is Slurm still healthy, do the node checks pass, does a job run, does the wave soak?
The rollout's `GateRunner` (engine/workload.py) on a Slurm cluster, passed in by its callers (checks/rollout_site.py).

Each gate returns a GateResult (ok, a one-line message, the failing nodes, the nodes Slurm drained during the
gate) and never raises for a failure of the cluster: an exception of the gate itself is a failed gate too.
Gates act on nothing but their own reservation and job: drains they cause are reported, the runner decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from reconciler.checks.runner import check_run, launcher_of
from reconciler.checks.slurm_view import fetch_view
from reconciler.common import hostlist
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import LoadedState
from reconciler.drivers.slurm_workload import nodes_view, script_drain
from reconciler.engine.workload import GateResult, NodeStatus, NodesView, new_drains
from reconciler.model import DesiredState, parse_duration
from reconciler.transport.base import Transport

POLL = 1.0


def _down(status: NodeStatus | None) -> bool:
    return status is None or status.down


class Gates:
    """Runs the gates of one rollout against a desired state over a transport."""

    def __init__(self, loaded: LoadedState, transport: Transport, timeout: float,
                 should_stop: Callable[[], bool] = lambda: False, log: Callable[[str], None] = lambda _: None) -> None:
        self.loaded, self.transport, self.timeout = loaded, transport, timeout
        self.should_stop, self.log = should_stop, log
        specs = node_specs(loaded.state)
        self.controller = specs[loaded.state.cluster.controller_names[0]]
        self.launcher = launcher_of(loaded.state)

    @property
    def state(self) -> DesiredState:
        """The desired state being rolled out."""
        return self.loaded.state

    def view(self) -> NodesView:
        """Slurm's view now (one command on the controller)."""
        view = fetch_view(self.transport, self.controller)
        return nodes_view(view.nodes, view.error)

    def run(self, name: str, nodes: list[str], before: NodesView) -> GateResult:
        """Run one gate by name on a wave's nodes; BEFORE: Slurm's view before the wave was applied."""
        started = time.monotonic()
        try:
            result = getattr(self, "_" + name.replace("-", "_"))(nodes, before)
        except Exception as exc:  # noqa: BLE001 - a broken gate is a failed gate, never a crashed rollout
            result = GateResult(name, False, f"{name}: {type(exc).__name__}: {exc}", list(nodes))
        result.seconds = time.monotonic() - started
        return result

    # ------------------------------------------------------------ the gates

    def _slurm(self, nodes: list[str], before: NodesView) -> GateResult:
        """Controller answers, every Slurm node that answered before answers again and is not DOWN/INVAL."""
        deadline = time.monotonic() + self.timeout
        watched = [n for n, fact in before.nodes.items() if not _down(fact)]
        while True:
            view = self.view()
            bad = [] if view.error else [n for n in watched if _down(view.nodes.get(n))]
            if not view.error and not bad:
                return GateResult("slurm", True, f"slurmctld answers; {len(watched)} node(s) responding")
            if time.monotonic() >= deadline or self.should_stop():
                why = view.error or "not responding or DOWN/INVAL: " + hostlist.compress(bad)
                return GateResult("slurm", False, f"Slurm after the change: {why}", bad or list(nodes))
            time.sleep(POLL)

    def _node_checks(self, nodes: list[str], before: NodesView) -> GateResult:
        """The desired state's node checks on the wave's nodes (deciding only: nothing drained)."""
        names = [c.name for c in self.state.checks.node]
        if not names:
            return GateResult("node-checks", True, "no node checks declared", skipped=True)
        outcome = check_run(self.loaded, self.transport, None, names=names, nodes=set(nodes), act=False,
                            should_stop=self.should_stop)
        failed = [r for r in outcome.results if not r.ok and not r.skipped]
        if not failed:
            return GateResult("node-checks", True, f"{len(outcome.results)} node check result(s) passed")
        first = failed[0]
        return GateResult("node-checks", False, f"node check {first.check} failed on "
                          f"{hostlist.compress(sorted({r.node for r in failed}))}: {first.message}",
                          sorted({r.node for r in failed}))

    def _smoke_job(self, nodes: list[str], before: NodesView) -> GateResult:
        """A job on exactly the wave's Slurm nodes through a reservation (prolog, epilog, mounts, container)."""
        from reconciler.checks.smoke import SmokeSpec, run_smoke

        slurm = [n for n in nodes if n in before.nodes]
        if not slurm:
            return GateResult("smoke-job", True, "no Slurm node in the wave", skipped=True)
        spec = SmokeSpec(nodes=slurm, mounts=self._mounts(slurm), container_image=self.state.rollout.gates.smoke_image,
                         timeout=self.timeout, reservation="reconciler-rollout")
        result = run_smoke(self.transport, self.launcher, self.controller, spec, should_stop=self.should_stop)
        return GateResult("smoke-job", result.ok, result.message, sorted(result.failed), dict(result.drained))

    def _nccl(self, nodes: list[str], before: NodesView) -> GateResult:
        """The NCCL checks on the wave's nodes, when it has two or more (deciding only)."""
        names = [c.name for c in self.state.checks.nccl]
        if not names or len(nodes) < 2:
            return GateResult("nccl", True, "no NCCL check, or fewer than two nodes in the wave", skipped=True)
        outcome = check_run(self.loaded, self.transport, None, names=names, nodes=set(nodes), act=False,
                            should_stop=self.should_stop)
        failed = [r for r in outcome.results if not r.ok and not r.skipped]
        if not failed:
            return GateResult("nccl", True, f"{len(outcome.results)} NCCL result(s) passed")
        bad = sorted({r.node for r in failed})
        return GateResult("nccl", False, f"NCCL check {failed[0].check} failed on {hostlist.compress(bad)}: "
                          f"{failed[0].message}", bad)

    def soak(self, nodes: list[str], before: NodesView, seconds: float) -> GateResult:
        """Wait SECONDS; a wave node Slurm drained meanwhile for a prolog/epilog failure fails the wave."""
        started = time.monotonic()
        deadline = started + seconds
        while time.monotonic() < deadline and not self.should_stop():
            time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
        view = self.view()
        drained = {n: r for n, r in new_drains(before, view, nodes).items() if script_drain(r)}
        result = GateResult("soak", not drained, f"soaked {seconds:.0f}s" if not drained else
                            f"drained by Slurm during the soak: {hostlist.compress(sorted(drained))} "
                            f"({next(iter(drained.values()))})", sorted(drained), drained)
        result.seconds = time.monotonic() - started
        return result

    def _mounts(self, nodes: list[str]) -> list[str]:
        """Mount points the smoke job checks: the gate's list, else the storage mounts of the wave's nodes."""
        if self.state.rollout.gates.smoke_mounts is not None:
            return list(self.state.rollout.gates.smoke_mounts)
        wave = set(nodes)
        return sorted({m.mountpoint for m in self.state.storage.mounts if wave & hostlist.expand_set(m.nodes)})


def gate_timeout(state: DesiredState) -> float:
    """Each gate's limit in seconds."""
    return float(parse_duration(state.rollout.gates.timeout))
