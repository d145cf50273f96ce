"""Configless Slurm on the testbed (issue 14, item 5): a bare testbed brought up in configless mode runs jobs
with no slurm.conf on its compute nodes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
COMPUTES = ("gpu01", "gpu02")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


def _idle(bed: Testbed, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = bed.run("ctl", "sinfo -h -N -o '%N %t' -p debug").stdout.split()
        if states[1::2] == ["idle", "idle"]:
            return True
        time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A bare 2-node testbed in configless mode: its desired state says `cluster.mode: configless`."""
    return testbed_factory(nodes=2, bare=True, configless=True)


def test_bare_configless_testbed_runs_jobs_without_slurm_conf_on_compute_nodes(bed: Testbed) -> None:
    assert "mode: configless" in (bed.desired_state / "cluster.yaml").read_text()
    applied = _cli("apply", str(bed.desired_state), "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert _idle(bed), bed.run("ctl", "sinfo").stdout
    srun = bed.run("ctl", "srun -N2 hostname", check=True)
    assert sorted(srun.stdout.split()) == ["gpu01", "gpu02"]
    assert "SlurmctldParameters=enable_configless" in bed.run("ctl", "cat /etc/slurm/slurm.conf", check=True).stdout
    for node in COMPUTES:
        assert bed.run(node, "test -e /etc/slurm/slurm.conf").returncode != 0, node
        assert bed.run(node, "test -e /etc/slurm/gres.conf").returncode != 0, node
        program = bed.run(node, "cat /etc/supervisor/conf.d/slurmd.conf", check=True).stdout
        assert "command=/usr/sbin/slurmd -D --conf-server ctl:6817\n" in program
        assert "ClusterName=" in bed.run(node, "cat /run/slurm/conf/slurm.conf", check=True).stdout  # fetched
    plan = _cli("plan", str(bed.desired_state))
    assert plan.returncode == 0, plan.stdout + plan.stderr


def test_stale_slurm_conf_on_a_compute_node_is_reported_and_removed(bed: Testbed) -> None:
    bed.run("gpu02", "cp /run/reconciler-testbed/roots/ctl/etc/slurm/slurm.conf /etc/slurm/slurm.conf", check=True)
    plan = _cli("plan", str(bed.desired_state))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "remove /etc/slurm/slurm.conf (cluster.mode is configless: slurmd uses a local slurm.conf" in plan.stdout
    assert "restarts slurmd on gpu02" in plan.stdout
    applied = _cli("apply", str(bed.desired_state), "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert bed.run("gpu02", "test -e /etc/slurm/slurm.conf").returncode != 0
    assert _idle(bed)
    assert sorted(bed.run("ctl", "srun -N2 hostname", check=True).stdout.split()) == ["gpu01", "gpu02"]
    assert _cli("plan", str(bed.desired_state)).returncode == 0
