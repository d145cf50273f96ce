"""A driver upgrade that needs a driver reload, not a reboot, on the testbed (real Slurm 22.05, real apt/dpkg over
real SSH; the driver packages, `modprobe` and nvidia-smi are the testbed's STAND-INS): each node is drained,
upgraded, its driver stack reloaded (`rollout.upgrade.driver_reload`), gated and resumed, without a reboot."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from functools import cmp_to_key
from pathlib import Path

import pytest

from reconciler.common.versions import deb_compare
from tests.rollout.upgrade_bed import DRIVER, cli, pair
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
NODES = ["gpu01", "gpu02"]
UPGRADE = """rollout:
  waves: all
  upgrade:
    max_unavailable: 1
    failure_budget: 0
    drain_timeout: 2m
    reboot_timeout: 2m
    driver_package: nvidia-driver-standin
    gates: [gpu]
    driver_reload: {modules: [nvidia_drm_standin, nvidia_standin]}
"""


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """2 compute nodes, Slurm, the package repository."""
    testbed = testbed_factory(nodes=2, packages=True)
    testbed.wait_idle(timeout=120)
    return testbed


def smi_version(bed: Testbed, node: str) -> set[str]:
    """The driver versions the stand-in nvidia-smi reports on NODE."""
    out = bed.run(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader", check=True).stdout
    return set(out.split())


def test_driver_upgrade_with_a_reload_and_no_reboot(bed: Testbed, tmp_path: Path) -> None:
    """550 -> 570 with `needs: driver-reload`: the reload makes nvidia-smi report 570 before the node is resumed;
    the boot id is unchanged (no reboot); one node out at a time; the second plan is empty."""
    desired = tmp_path / "desired"
    shutil.copytree(bed.desired_state, desired)
    versions = sorted(bed.package_manifest["deb"]["standin"][DRIVER], key=cmp_to_key(deb_compare))
    old, new = versions[0], versions[-1]
    (desired / "packages.yaml").write_text(pair(old, "gpu[01-02]"))
    first = cli("apply", "--yes", str(desired))
    assert first.returncode == 0, first.stdout + first.stderr
    for node in NODES:  # the old driver loaded, as after a boot with it installed
        bed.run(node, "modprobe nvidia_standin && modprobe -r nvidia_standin && modprobe nvidia_standin", check=True)
        assert smi_version(bed, node) == {old.rsplit("-", 1)[0]}
    boots = {n: bed.run(n, "cat /proc/sys/kernel/random/boot_id", check=True).stdout.strip() for n in NODES}

    (desired / "rollout.yaml").write_text(UPGRADE)
    (desired / "packages.yaml").write_text(pair(new, "gpu[01-02]", "driver-reload"))
    plan = cli("plan", str(desired))
    assert plan.returncode == 2 and "(needs a driver reload)" in plan.stdout, plan.stdout + plan.stderr
    done = cli("apply", "--yes", str(desired))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for node in NODES:
        assert f"upgrade: {node}: reloading" in output and f"upgrade: {node}: rebooting" not in output, output
        assert output.count(f"upgrade: {node}: resumed") == 1, output
        assert bed.run(node, "cat /proc/sys/kernel/random/boot_id", check=True).stdout.strip() == boots[node]
        assert smi_version(bed, node) == {new.rsplit("-", 1)[0]}, node
        state = bed.run("ctl", f"scontrol show node {node} -o | grep -o 'State=[^ ]*'", check=True).stdout.strip()
        assert "DRAIN" not in state, (node, state)
    again = cli("plan", str(desired))
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr
