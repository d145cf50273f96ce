"""A node Slurm brings back from a slow reboot without the upgrade's drain (Slurm 22.05 does after a long reboot,
seen on the testbed) is drained again and its new jobs end before the gates; it is resumed once. The machine over a
real local shell and the STAND-IN cluster of files (tests/rollout/upgrade_sim.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

from reconciler.engine.drain import DrainSteps
from reconciler.rollout.upgrade import Hooks
from tests.ha.local_shell import LocalShell
from tests.rollout.upgrade_sim import NEW, FileJournal, Sim


class DrainLosingSim(Sim):
    """The boot clears the node's drain, and a job lands on it that ends 0.5 s later (STAND-IN for Slurm)."""

    def steps(self, node: str) -> DrainSteps:
        """Sim's steps, the boot losing the drain and taking a job."""
        steps = super().steps(node)
        d = shlex.quote(str(self.dir(node)))
        lose = f"rm -f {d}/drained; echo 1001 > {d}/jobs; (sleep 0.5; : > {d}/jobs) &"
        return steps.model_copy(update={"reboot": steps.part("reboot").replace("rm -f", f"{lose} rm -f", 1)})

    def hooks(self, transport: LocalShell) -> Hooks:
        """Sim's hooks; the validation also notes whether the node was drained and idle when gated."""
        hooks = super().hooks(transport)
        validate = hooks.validate

        def noting(node: str) -> str | None:
            (self.dir(node) / "gated").write_text(f"{self.read(node, 'drained')}|{self.read(node, 'jobs')}\n")
            return validate(node)
        hooks.validate = noting
        return hooks


def test_drain_lost_in_the_reboot_is_drained_again_before_the_gates(tmp_path: Path) -> None:
    sim = DrainLosingSim(tmp_path, ["n1"])
    sim.create()
    lines: list[str] = []
    machine = sim.machine({"max_unavailable": 1, "reboot_timeout": "30s", "drain_timeout": "30s"},
                          FileJournal(tmp_path / "journal.json"))
    machine.log = lines.append
    outcome = machine.run(["n1"])
    assert outcome.done == ["n1"], (outcome, lines)
    assert sim.read("n1", "gated") == "reconciler: upgrade c0ffee|", lines  # drained (ours) and no job left
    assert "upgrade: n1: back from the reboot without its drain: drained again" in lines, lines
    assert sim.count("n1", "reboots") == 1 and sim.count("n1", "resumes") == 1, lines
    assert sim.read("n1", "drained") == "" and sim.read("n1", "loaded") == NEW
