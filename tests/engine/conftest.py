"""A bare testbed for the engine tests: the reconciler's first apply configures its Slurm."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.engine.testbed_state import write_state
from tests.testbed_fixture import SLURM_RELEASES, Testbed

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Bed:
    """A running bare testbed and the desired-state directory written for it."""

    testbed: Testbed
    desired: Path

    @property
    def name(self) -> str:
        """The testbed's name."""
        return self.testbed.name

    @property
    def state_dir(self) -> Path:
        """Where the testbed keeps ssh_config and known_hosts."""
        return self.testbed.state_dir

    def exec(self, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a shell command inside a node (nsenter, not SSH)."""
        return self.testbed.run(node, command, check=check, timeout=300)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run the reconciler CLI."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)


@pytest.fixture(scope="package", params=SLURM_RELEASES)
def bed(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest) -> Bed:
    """A bare 2-node testbed (no slurm.conf, daemons stopped) of each Slurm release, and its desired state."""
    testbed = testbed_factory(nodes=2, bare=True, slurm=request.param)
    desired = write_state(tmp_path_factory.mktemp("desired"), name="rteng", state_dir=testbed.state_dir,
                          subnet=testbed.subnet, computes="gpu[01-02]", slurm=testbed.slurm)
    return Bed(testbed=testbed, desired=desired)
