"""The README's first command: the testbed's own desired state, applied to a bare testbed, converges."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.engine.conftest import REPO
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed


def test_apply_testbed_desired_state_on_bare_testbed(testbed_factory: Callable[..., Testbed]) -> None:
    bed = testbed_factory(nodes=2, bare=True)
    desired = bed.up_output.strip().splitlines()[-1]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                              timeout=300, cwd=REPO)

    applied = cli("apply", desired, "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    bed.wait_idle()
    partitions = bed.run("ctl", "sinfo -h -o %P", check=True).stdout.split()
    assert "debug*" in partitions and "batch" in partitions
    again = cli("plan", desired)
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout
