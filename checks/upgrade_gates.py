"""The upgrade machine's hooks (engine/upgrade_steps.py `Hooks`) on a real cluster, passed in by the rollout's
callers (checks/rollout_site.py): Slurm's reboot steps (drivers/slurm_reboot.py), the engine's plan
and apply of one node's held changes, the GPU gate (checks/gpu: health, XIDs, the loaded driver equal to the
installed `driver_package`), DCGM, NHC and a site's command (checks/node_gates.py), and the smoke job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from reconciler.checks.gpu import judge as gpu_judge
from reconciler.checks.gpu.dcgm import dcgm_command
from reconciler.checks.gpu.query import MINORS_COMMAND, parse_minors, parse_query, query_command
from reconciler.checks.gpu.xid import XidMemory, xid_command
from reconciler.checks.node_gates import command_line, judge_command, judge_nhc, nhc_command
from reconciler.common import hostlist
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import LoadedState
from reconciler.drivers import all_drivers
from reconciler.drivers.slurm_reboot import (
    fail_command,
    installed_version_command,
    reboot_steps,
    reload_steps,
    upstream,
)
from reconciler.engine.apply import ApplyOptions
from reconciler.engine.ops import RunCommand
from reconciler.engine.run import open_reconcile
from reconciler.engine.upgrade_steps import Hooks, Prepared, ReloadSteps
from reconciler.engine.workload import GateRunner
from reconciler.facts.sections import Section, script, split_sections
from reconciler.model import GpuExpectation
from reconciler.model.bounds import parse_duration
from reconciler.model.upgrade import CommandGate, GateName, Upgrade
from reconciler.transport.base import Transport

DCGM_TIMEOUT = 900
Log = Callable[[str], None]


def expectation(loaded: LoadedState, node: str) -> GpuExpectation | None:
    """The GPUs the node checks expect on NODE (the first check that names GPUs for it), or None."""
    for check in loaded.state.checks.node:
        if check.gpus is not None and node in hostlist.expand_set(check.nodes):
            return check.gpus
    return None


def judge_gpu(expect: GpuExpectation | None, sections: dict[str, Section], package: str | None,
              dcgm_level: int | None) -> str | None:
    """Why the GPU gate fails on these probe sections (None: it passed): nvidia-smi answers for every GPU,
    no fatal XID this boot, the loaded driver is the installed driver package's upstream version, DCGM passes."""
    query = sections.get("gpu")
    if query is None or query.rc is None:
        return "gpu gate: no complete output from nvidia-smi"
    # no node check names the GPUs: as many as nvidia-smi lists (a GPU gone shows as its exit status and XID)
    base = expect or GpuExpectation(count=len(parse_query(query.output).rows))
    want = None
    if package:
        pkg = sections.get("pkg")
        installed = pkg.output.strip() if pkg is not None and pkg.rc == 0 else ""
        if not installed:
            return f"gpu gate: {package} is not installed"
        want = upstream(installed)
        base = base.model_copy(update={"driver": want})
    items, parsed = gpu_judge.query_items(base, query)
    if query.rc not in (0, None):
        # its error line (e.g. "Unable to determine the device handle ..."), not the last GPU's CSV row
        said = (parsed.other if parsed is not None else query.lines) or [""]
        items.insert(0, gpu_judge.Item("gpus", "fail", f"gpus: nvidia-smi exit {query.rc}"
                                                       + (f": {said[-1][:160]}" if said[-1] else "")))
    if base.health and "gpu.xid" in sections:
        memory = XidMemory()
        minors = parse_minors(sections["gpu.minors"].output) if "gpu.minors" in sections else {}
        xids, _, _ = gpu_judge.xid_items(base, sections["gpu.xid"], memory,
                                         gpu_judge.index_of(parsed, minors, memory))
        items += xids
    if want is not None and parsed is not None:
        loaded = sorted({row.driver for row in parsed.rows})
        if loaded and loaded != [want]:
            items.append(gpu_judge.Item("gpus", "fail", f"gpus: driver {','.join(loaded)} loaded, "
                                                        f"{package} {want} installed"))
    if dcgm_level is not None:
        items.append(gpu_judge.dcgm_item(dcgm_level, sections.get("dcgm")))
    bad = [i for i in items if not i.ok]
    return "gpu gate: " + "; ".join(dict.fromkeys(i.message for i in bad))[:300] if bad else None


class RealHooks:
    """Hooks of the upgrade machine for one rollout of LOADED over TRANSPORT."""

    def __init__(self, loaded: LoadedState, config: Upgrade, transport: Transport, options: ApplyOptions,
                 gates: GateRunner, log: Log) -> None:
        self.loaded, self.config, self.transport, self.options = loaded, config, transport, options
        self.gates, self.log = gates, log
        self.specs = node_specs(loaded.state)
        self.controller = loaded.state.cluster.controller_names[0]

    def hooks(self) -> Hooks:
        """The Hooks object for UpgradeMachine."""
        return Hooks(steps=lambda node: reboot_steps(self.controller, node, self.loaded.commit,
                                                     self.config.mode == "reservation", self.config.requeue),
                     reload=self.reload, prepare=self.prepare, validate=self.validate,
                     after_resume=self.after_resume,
                     fail=lambda node, why: fail_command(node, self.loaded.commit, why), converge=self.converge)

    def converge(self, node: str) -> str | None:
        """Apply NODE's desired state again after its boot (a mount a reboot dropped); None when it worked."""
        run = open_reconcile(self.loaded, all_drivers(), limit=node, transport=self.transport)
        run.gather()
        plan = run.plan()
        if not plan.has_changes:
            return None
        result = run.apply(plan, replace(self.options, allow=frozenset()), log=self.log)
        problems = [m for ms in result.failures.values() for m in ms] + ([result.stopped] if result.stopped else [])
        return f"after the reboot: {'; '.join(problems)}"[:300] if problems else None

    def reload(self, node: str) -> ReloadSteps:
        """The driver reload of NODE under its service manager."""
        return reload_steps(self.config.driver_reload, self.specs[node].service_manager)

    def prepare(self, node: str) -> Prepared:
        """Plan NODE now; its changes that need a reboot or a driver reload, their undo, and their apply."""
        run = open_reconcile(self.loaded, all_drivers(), limit=node, transport=self.transport)
        run.gather()
        plan = run.plan()
        needing = [c for c in plan.changing() if c.needs is not None and c.node == node]
        if not needing:
            return Prepared(None, [], lambda: None)
        needs = "reboot" if any(c.needs == "reboot" for c in needing) else "driver-reload"
        undo = [op.command for c in needing if c.restore is not None for op in c.restore.ops
                if isinstance(op, RunCommand)]
        only = plan.model_copy(update={"changes": needing, "followups": []})
        options = replace(self.options, allow=frozenset({"reboot", "driver-reload"}))

        def apply() -> str | None:
            result = run.apply(only, options, log=self.log)
            problems = [m for ms in result.failures.values() for m in ms]
            return "; ".join(problems)[:300] if problems or result.stopped else None
        return Prepared(needs, undo, apply, "; ".join(c.summary for c in needing))

    def validate(self, node: str) -> str | None:
        """The gates on the drained node, in the order `gates` lists them (smoke excepted: it needs the node
        resumed, after_resume runs it): gpu, dcgm, nhc, a site's command. The first that fails says why."""
        for gate in self.config.gates:
            if gate == "smoke":
                continue
            why = self._gate(node, gate)
            if why:
                return why
        return None

    def _gate(self, node: str, gate: GateName | CommandGate) -> str | None:
        if isinstance(gate, CommandGate):
            seconds = parse_duration(gate.timeout)
            result = self.transport.run(self.specs[node], command_line(gate, seconds), timeout=seconds + 30)
            rc = result.exit_code if result.error is None else None
            return judge_command(gate, seconds, rc, result.stdout).why
        if gate == "nhc":
            seconds = parse_duration(self.config.nhc_timeout)
            result = self.transport.run(self.specs[node], nhc_command(seconds), timeout=seconds + 30)
            verdict = judge_nhc(result.exit_code if result.error is None else None, result.stdout)
            if verdict.note:
                self.log(f"upgrade: {node}: {verdict.note}")
            return verdict.why
        return self._gpu(node, gate == "dcgm")

    def _gpu(self, node: str, dcgm: bool) -> str | None:
        """The gpu gate (health, XIDs, driver version) or the dcgm gate (diag at dcgm_level), one round trip."""
        if dcgm:
            parts = [("dcgm", dcgm_command(self.config.dcgm_level, DCGM_TIMEOUT))]
        else:
            parts = [("gpu", query_command()), ("gpu.minors", MINORS_COMMAND), ("gpu.xid", xid_command())]
            if self.config.driver_package:
                parts.append(("pkg", installed_version_command(self.config.driver_package)))
        result = self.transport.run(self.specs[node], script(parts), timeout=DCGM_TIMEOUT + 60)
        if result.error:
            return f"{'dcgm' if dcgm else 'gpu'} gate: {result.error}"
        sections = split_sections(result.stdout)
        if dcgm:
            item = gpu_judge.dcgm_item(self.config.dcgm_level, sections.get("dcgm"))
            return None if item.ok else f"dcgm gate: {item.message}"
        return judge_gpu(expectation(self.loaded, node), sections, self.config.driver_package, None)

    def after_resume(self, node: str) -> str | None:
        """The smoke job on the resumed node (in its own reservation), when asked for."""
        if "smoke" not in self.config.gates:
            return None
        before = self.gates.view()
        result = self.gates.run("smoke-job", [node], before)
        return None if result.ok else f"smoke: {result.message}"[:300]
