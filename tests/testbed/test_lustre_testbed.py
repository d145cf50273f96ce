"""Lustre mounts on the testbed (issue 14, item 6), through the mount.lustre stand-in (no Lustre kernel here)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A running 2-node testbed (its ctl serves the stand-in Lustre file system `lustrefs`)."""
    return testbed_factory(nodes=2)


def test_lustre_mount_on_two_compute_nodes_then_second_plan_is_clean(bed: Testbed, tmp_path: Path) -> None:
    mgs = bed.ip("ctl")
    desired = tmp_path / "desired-state"
    shutil.copytree(bed.desired_state, desired)
    storage = desired / "storage.yaml"
    storage.write_text(storage.read_text() + f"""\
    - source: {mgs}@tcp:/lustrefs
      mountpoint: /mnt/lustre
      type: lustre
      options: [defaults, _netdev, flock]
      nodes: gpu[01-02]
""")
    applied = _cli("apply", str(desired), "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    for node in ("gpu01", "gpu02"):
        fstab = bed.run(node, "cat /etc/fstab", check=True).stdout.splitlines()
        assert f"{mgs}@tcp:/lustrefs /mnt/lustre lustre defaults,_netdev,flock 0 0" in fstab
        mountinfo = bed.run(node, "grep ' /mnt/lustre ' /proc/self/mountinfo", check=True).stdout
        assert f" {mgs}@tcp:/lustrefs " in mountinfo, mountinfo
    assert "/mnt/lustre" not in bed.run("ctl", "cat /etc/fstab", check=True).stdout
    bed.run("gpu01", "echo from-gpu01 > /mnt/lustre/hello", check=True)  # one file system, shared by clients
    assert bed.run("gpu02", "cat /mnt/lustre/hello", check=True).stdout == "from-gpu01\n"

    plan = _cli("plan", str(desired))
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert bed.run("gpu02", "mount -a && grep -c ' /mnt/lustre ' /proc/self/mountinfo").stdout.strip() == "1"


def test_stand_in_refuses_unknown_fs_name_and_non_mgs_nid(bed: Testbed) -> None:
    bed.run("gpu01", "mkdir -p /mnt/x", check=True)
    wrong_fs = bed.run("gpu01", f"mount -t lustre {bed.ip('ctl')}@tcp:/nosuch /mnt/x")
    assert wrong_fs.returncode != 0 and "Is the filesystem name correct?" in wrong_fs.stderr, wrong_fs.stderr
    no_mgs = bed.run("gpu01", f"mount -t lustre {bed.ip('gpu02')}@tcp:/lustrefs /mnt/x")
    assert no_mgs.returncode != 0 and "Is the MGS running?" in no_mgs.stderr, no_mgs.stderr
    assert " /mnt/x " not in bed.run("gpu01", "cat /proc/self/mountinfo", check=True).stdout
