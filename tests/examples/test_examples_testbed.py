"""Each reference example, testbed-sized, applied to a bare testbed: converges, stays converged, and works."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.examples.variant import REPO, VARIANTS, Variant, build
from tests.testbed_fixture import Testbed

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(900)]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The reconciler CLI of this checkout."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env=env)


def prepare(variant: Variant, bed: Testbed, tmp_path: Path) -> Path:
    """The variant's desired state for this testbed, its munge key a new one on the login node (this host)."""
    desired = build(variant, bed.desired_state, tmp_path / "desired", bed.subnet)
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(128))
    munge = desired / "munge.yaml"
    munge.write_text(munge.read_text().replace("/etc/reconciler/munge.key", str(key)))
    return desired


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_example_converges_on_a_bare_testbed_and_the_cluster_works(
        name: str, testbed_factory: Callable[..., Testbed], tmp_path: Path) -> None:
    variant = VARIANTS[name]
    configless = "mode" in variant.cluster_keys
    bed = testbed_factory(nodes=2, bare=True, configless=configless)
    desired = prepare(variant, bed, tmp_path)
    assert cli("validate", str(desired)).returncode == 0, cli("validate", str(desired)).stderr

    applied = cli("apply", str(desired), "--yes")
    assert applied.returncode == 0, applied.stdout[-4000:] + applied.stderr[-4000:]
    again = cli("plan", str(desired))
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout[-4000:] + again.stderr[-2000:]

    srun = bed.run("ctl", "srun -N2 hostname", check=True, timeout=120)
    assert sorted(srun.stdout.split()) == ["gpu01", "gpu02"]
    for node in bed.computes:
        for mountpoint in variant.mounts:
            assert bed.run(node, f"findmnt -n {mountpoint}", check=False).returncode == 0, (node, mountpoint)
    if configless:
        for node in bed.computes:
            assert bed.run(node, "test -e /etc/slurm/slurm.conf", check=False).returncode != 0
    if variant.nccl_check:
        check = cli("check", str(desired), variant.nccl_check)
        assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
        assert "pass" in check.stdout.lower(), check.stdout[-3000:]
