"""A cluster of files driven by a real local shell, for the upgrade machine's unit tests (and its killed-process
tests: `python -m tests.rollout.upgrade_sim DIR NODES` runs one upgrade with the journal in DIR/journal.json).

STAND-IN for Slurm and a GPU node (named so): each node is a directory with its boot id, its drain reason, its
running jobs (one line each), the driver version installed and the one loaded (copied at "boot"). `reboot` asks
for a boot that happens shortly after in the background, as a node reboots after `scontrol reboot` returns.
"""

from __future__ import annotations

import json
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

from reconciler.engine.drain import DrainSteps
from reconciler.engine.upgrade_steps import ReloadSteps
from reconciler.model.upgrade import Upgrade
from reconciler.rollout.admission import Admission
from reconciler.rollout.journal import RolloutJournal, decode, encode
from reconciler.rollout.operator import Desk
from reconciler.rollout.upgrade import Hooks, Prepared, UpgradeMachine
from tests.ha.local_shell import LocalShell, spec

OLD, NEW = "550.127.05", "570.86.15"
REASON = "reconciler: upgrade c0ffee"


class FileJournal:
    """The rollout journal as a JSON file (what survives a SIGKILL), every save encoded whole and renamed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.saves: list[RolloutJournal] = []

    def save(self, journal: RolloutJournal) -> None:
        """Write JOURNAL atomically; keep a copy of each save, read back from what was written."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(encode(journal)))
        tmp.replace(self.path)
        self.saves.append(decode(json.loads(self.path.read_text()), str(self.path)))

    def load(self) -> RolloutJournal | None:
        """The journal, if any."""
        return decode(json.loads(self.path.read_text()), str(self.path)) if self.path.exists() else None

    def clear(self) -> None:
        """Forget it."""
        self.path.unlink(missing_ok=True)


class Sim:
    """The file cluster under ROOT."""

    def __init__(self, root: Path, nodes: list[str]) -> None:
        self.root, self.names = root, nodes

    def create(self, broken: tuple[str, ...] = ()) -> None:
        """Every node booted on OLD, idle, not drained; BROKEN ones fail the validation after the upgrade."""
        for node in self.names:
            d = self.dir(node)
            d.mkdir(parents=True, exist_ok=True)
            (d / "boot_id").write_text(str(uuid.uuid4()) + "\n")
            (d / "version").write_text(OLD + "\n")
            (d / "loaded").write_text(OLD + "\n")
            (d / "jobs").write_text("")
            if node in broken:
                (d / "broken").write_text("xid 79\n")

    def dir(self, node: str) -> Path:
        """NODE's directory."""
        return self.root / node

    def read(self, node: str, name: str) -> str:
        """One of NODE's files, stripped ('' when absent)."""
        path = self.dir(node) / name
        return path.read_text().strip() if path.exists() else ""

    def count(self, node: str, name: str) -> int:
        """Lines of NODE's counter file NAME (reboots, resumes)."""
        return len(self.read(node, name).splitlines())

    def steps(self, node: str) -> DrainSteps:
        """The stand-in's drain and reboot steps for NODE."""
        d = shlex.quote(str(self.dir(node)))
        boot = (f"cp {d}/version {d}/loaded; cat /proc/sys/kernel/random/uuid > {d}/boot_id.tmp; "
                f"mv {d}/boot_id.tmp {d}/boot_id; rm -f {d}/pending")
        return DrainSteps(
            run_on="ctl", drained=f"test -s {d}/drained", ours=f"grep -q '^reconciler: upgrade' {d}/drained",
            drain=f"echo {shlex.quote(REASON)} > {d}/drained", jobs=f"cat {d}/jobs",
            reboot=f"echo r >> {d}/reboots; touch {d}/pending; (sleep 0.3; {boot}) >/dev/null 2>&1 &",
            pending=f"test -e {d}/pending", boot_id=f"cat {d}/boot_id",
            registered=f"test ! -e {d}/pending", resume=f"rm -f {d}/drained; echo x >> {d}/resumes")

    def hooks(self, transport: LocalShell) -> Hooks:
        """Hooks: the apply installs NEW (undo: OLD), the validation wants NEW loaded and no fault."""
        def prepare(node: str) -> Prepared:
            d = shlex.quote(str(self.dir(node)))
            if self.read(node, "version") == NEW:
                return Prepared(None, [], lambda: None)

            def apply() -> str | None:
                done = transport.run(spec(node), f"echo {NEW} > {d}/version")
                return None if done.ok else done.stderr
            return Prepared("reboot", [f"echo {OLD} > {d}/version"], apply, f"driver {OLD} -> {NEW}")

        def validate(node: str) -> str | None:
            if self.read(node, "broken") and self.read(node, "loaded") == NEW:
                return "gpu gate: gpu 0 xid 79 (fallen off the bus)"
            loaded = self.read(node, "loaded")
            return None if loaded == NEW else f"gpu gate: driver {loaded} loaded, {NEW} installed"

        def fail(node: str, why: str) -> str:
            return f"printf '%s\\n' {shlex.quote(REASON + ' failed: ' + why)} > {shlex.quote(str(self.dir(node)))}/drained"

        return Hooks(steps=self.steps, reload=lambda node: ReloadSteps(), prepare=prepare, validate=validate,
                     fail=fail)

    def machine(self, config: dict[str, Any], journal: FileJournal, record: RolloutJournal | None = None,
                transport: LocalShell | None = None, admission: Admission | None = None,
                operator: Desk | None = None) -> UpgradeMachine:
        """A machine over a real local shell, its record in JOURNAL (ADMISSION: asked before each node; OPERATOR:
        the operator's skips and retries)."""
        transport = transport or LocalShell()
        specs = {n: spec(n) for n in [*self.names, "ctl"]}
        return UpgradeMachine(Upgrade.model_validate(config), self.hooks(transport), transport, specs, journal,
                              record if record is not None else RolloutJournal(commit="c0ffee"), poll=0.05,
                              admission=admission, operator=operator)


def main(argv: list[str]) -> int:
    """`upgrade_sim DIR NODES CONFIG-JSON`: run one upgrade of NODES (comma-separated) on the sim under DIR."""
    root, nodes, config = Path(argv[0]), argv[1].split(","), json.loads(argv[2])
    sim = Sim(root, nodes)
    sim.machine(config, FileJournal(root / "journal.json")).run(nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
