"""Fixtures of the desired-state, render and hostlist tests: the example desired state, copies of it, real Slurm's scontrol."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "desired-state"

MINIMAL_SLURM_CONF = """\
ClusterName=hostlist-test
SlurmctldHost=localhost
NodeName=n1 CPUs=1 State=UNKNOWN
PartitionName=p Nodes=n1 Default=YES State=UP
"""


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """A private copy of the example desired-state directory, to plant faults in."""
    target = tmp_path / "desired-state"
    shutil.copytree(EXAMPLE, target)
    return target


def plant(path: Path, old: str, new: str) -> int:
    """Replace the one occurrence of `old` by `new` in a file; return the 1-based line where `new` starts."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {path.name}"
    start = text.index(old)
    path.write_text(text[:start] + new + text[start + len(old) :])
    return text[:start].count("\n") + 1


def append(path: Path, new: str) -> int:
    """Append text to a file; return the 1-based line where it starts."""
    text = path.read_text()
    assert text.endswith("\n")
    path.write_text(text + new)
    return text.count("\n") + 1


class Scontrol:
    """Real Slurm's scontrol with a minimal offline configuration."""

    def __init__(self, conf: Path) -> None:
        self.env = {"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}

    def run(self, *args: str) -> str:
        """Run scontrol; return stdout and stderr together (it exits 0 even on invalid hostlists)."""
        out = subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, env=self.env, timeout=30, check=False
        )
        return out.stdout + out.stderr

    def hostnames(self, expr: str) -> list[str] | None:
        """`scontrol show hostnames EXPR` as a list, or None when Slurm rejects the expression."""
        out = self.run("show", "hostnames", expr)
        if "Invalid hostlist" in out or "error" in out:
            return None
        return out.split()

    def hostlist(self, expr: str) -> str | None:
        """`scontrol show hostlist EXPR` (Slurm's own compression), or None when rejected."""
        out = self.run("show", "hostlist", expr)
        if "Invalid hostlist" in out or "error" in out:
            return None
        return out.strip()


@pytest.fixture(scope="session")
def scontrol(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scontrol]:
    """Debian's scontrol, configured offline through SLURM_CONF (skips when slurm-client is missing)."""
    if shutil.which("scontrol") is None:
        pytest.skip("scontrol not found: install Debian's slurm-client to compare hostlists with real Slurm")
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    conf.write_text(MINIMAL_SLURM_CONF)
    tool = Scontrol(conf)
    probe = tool.hostnames("n[1-2]")
    if probe != ["n1", "n2"]:
        pytest.skip(f"scontrol does not work offline here: {tool.run('show', 'hostnames', 'n[1-2]')!r}")
    yield tool
