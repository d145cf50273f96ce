"""A bare testbed for the engine tests: the reconciler's first apply configures its Slurm."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.engine.testbed_state import write_state

REPO = Path(__file__).resolve().parents[2]
TESTBED = REPO / "deploy" / "testbed" / "testbed"
NAME, SUBNET, COMPUTES = "rteng", "10.253.0", "gpu[01-02]"


@dataclass
class Bed:
    """A running bare testbed and its desired-state directory."""

    name: str
    state_dir: Path
    desired: Path

    def exec(self, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a shell command inside a node (nsenter, not SSH)."""
        proc = subprocess.run([str(TESTBED), "exec", "--name", self.name, node, "sh", "-c", _quote(command)],
                              capture_output=True, text=True, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(f"{node}: {command}: rc={proc.returncode} {proc.stderr}")
        return proc

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run the reconciler CLI."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)


def _quote(command: str) -> str:
    return "'" + command.replace("'", "'\"'\"'") + "'"


def _usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (namespaces)"
    for binary in ("slurmctld", "slurmd", "munged", "sshd", "supervisord", "mksquashfs"):
        if not shutil.which(binary) and not Path(f"/usr/sbin/{binary}").exists():
            return f"{binary} missing: run deploy/testbed/testbed deps"
    return None


@pytest.fixture(scope="package")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """Bring up a bare 2-node testbed; always tear it down."""
    reason = _usable()
    if reason:
        pytest.skip(reason)
    subprocess.run([str(TESTBED), "down", "--name", NAME], capture_output=True, timeout=120)
    up = subprocess.run([str(TESTBED), "up", "--name", NAME, "--subnet", SUBNET, "--nodes", "2", "--bare"],
                        capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stderr
        state_dir = Path(f"/var/lib/reconciler-testbed/{NAME}")
        desired = write_state(tmp_path_factory.mktemp("desired"), name="rteng", state_dir=state_dir,
                              subnet=SUBNET, computes=COMPUTES)
        yield Bed(name=NAME, state_dir=state_dir, desired=desired)
    finally:
        subprocess.run([str(TESTBED), "down", "--name", NAME], capture_output=True, timeout=120)
