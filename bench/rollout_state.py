"""The desired state of the rollout section: the engine tests' testbed state (tests/engine/testbed_state.py, the
one definition of it) plus `Prolog=/etc/slurm/prolog.sh`, and the rollout variants measured.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.engine.testbed_state import ROLLOUT_ALL as ROLLOUT_ALL  # re-exported: one definition
from tests.engine.testbed_state import write_state as engine_state

PROLOG = "/etc/slurm/prolog.sh"
GOOD_PROLOG = "#!/bin/sh\nexit 0\n"
MANAGED = "/etc/bench-rollout.conf"
GATE_TIMEOUT = "90s"
DEFAULT_SOAK_S = 30  # reconciler.model.Rollout's default soak
# The tests' progressive rollout (canary 1, then 50%, then 100%) with the soak at 0 s, so that the figure is the
# gates' cost; the stand-in NCCL gate off (the default, said here), no node checks declared: the smoke job gates.
ROLLOUT_PROGRESSIVE = f"""\
rollout:
  waves: progressive
  canary: 1
  steps: ["50%", "100%"]
  soak: 0s
  gates:
    timeout: {GATE_TIMEOUT}
    smoke_job: true
    nccl: false
"""

Edit = Callable[[str], str]


def write_state(directory: Path, *, name: str, state_dir: Path, subnet: str, computes: str,
                memory: int = 1000) -> Path:
    """Write the desired state (Prolog set, progressive rollout) for a bare testbed; return the directory."""
    engine_state(directory, name=name, state_dir=state_dir, subnet=subnet, computes=computes, memory=memory)
    cluster = directory / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("    SlurmdParameters: config_overrides\n",
                                                   "    SlurmdParameters: config_overrides\n"
                                                   f"    Prolog: {PROLOG}\n"))
    (directory / "rollout.yaml").write_text(ROLLOUT_PROGRESSIVE)
    return directory


def prolog_patch(content: str) -> Edit:
    """An edit of patches.yaml replacing the prolog patch's content."""
    def edit(text: str) -> str:
        head, _, _ = text.partition("    content: |\n")
        return head + "    content: |\n" + "".join(f"      {line}\n" for line in content.splitlines())
    return edit


def files_yaml(content: str, computes: str) -> Edit:
    """files.yaml: one managed file on every compute node (COMPUTES, a hostlist)."""
    body = "".join(f"      {line}\n" for line in content.splitlines())
    return lambda _: f"files:\n  - path: {MANAGED}\n    nodes: {computes}\n    content: |\n{body}"


def replace(text: str) -> Edit:
    """An edit that replaces a file's whole text."""
    return lambda _: text
