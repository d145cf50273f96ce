"""A broken driver stopped at the canary, on the testbed (real Slurm 22.05, real apt/dpkg over real SSH, the
testbed's reboot through Slurm's RebootProgram; the NVIDIA packages and nvidia-smi are the testbed's STAND-INS).

4 compute nodes run the 550 stand-in pair (loaded: installed by an orchestrated upgrade, so each booted it). The
next commit moves the pair to the BROKEN 570 (`570.86.15-0broken1`: once loaded GPU 0 falls off the bus, nvidia-smi
exits 15, dmesg prints XID 79) with `rollout.upgrade: {failure_budget: 0}` and a canary of 1 node. The canary
reboots into it, fails the GPU gate, the rollout stops there and the canary is rolled back: the package downgraded
by the journalled undo, rebooted again, 550 loaded. It stays DRAINED for a human, its reason naming the failure
and the rollback (a node that failed its gate is never resumed by the reconciler). No other node is touched."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from functools import cmp_to_key
from pathlib import Path

import pytest

from reconciler.common.versions import deb_compare
from tests.rollout.upgrade_bed import DRIVER, FM, cli, field, pair
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
NODES = [f"gpu{i:02d}" for i in range(1, 5)]
CANARY, OTHERS = NODES[0], NODES[1:]
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"
SMI = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
PACKAGES = f"dpkg-query -W -f='${{Package}}=${{Version}} ${{db:Status-Status}}\\n' {DRIVER} {FM}"
# The 550 state: every node at once (max_unavailable 4), so each boots the driver it installed.
FIRST = """rollout:
  waves: all
  upgrade:
    max_unavailable: 4
    reboot_timeout: 2m
    driver_package: nvidia-driver-standin
    gates: [gpu]
"""
# The broken commit's rollout: a canary of 1; one failed node is past the budget.
CANARY_ROLLOUT = """rollout:
  waves: progressive
  canary: 1
  steps: ["100%"]
  soak: 1s
  upgrade:
    max_unavailable: 1
    failure_budget: 0
    drain_timeout: 2m
    reboot_timeout: 2m
    driver_package: nvidia-driver-standin
    gates: [gpu]
"""


def write_state(base: Path, target: Path, version: str, rollout: str) -> Path:
    """A copy of the testbed's desired state at TARGET with the pair at VERSION and ROLLOUT."""
    shutil.copytree(base, target)
    (target / "packages.yaml").write_text(pair(version, "gpu[01-04]", "reboot"))
    (target / "rollout.yaml").write_text(rollout)
    return target


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """4 compute nodes, Slurm, the package repository."""
    testbed = testbed_factory(nodes=4, packages=True)
    testbed.wait_idle(timeout=120)
    return testbed


def test_broken_driver_fails_the_canary_and_is_rolled_back(bed: Testbed, tmp_path: Path) -> None:
    """The canary boots the broken 570, fails the GPU gate (XID 79), the rollout stops and rolls it back to 550
    (downgrade, second reboot, 550 loaded); it stays drained with the reason; gpu02-04 never drained or rebooted."""
    manifest = bed.package_manifest["deb"]
    good = sorted(manifest["standin"][DRIVER], key=cmp_to_key(deb_compare))[0]
    broken = manifest["standin_broken"][DRIVER]
    old = write_state(bed.desired_state, tmp_path / "old", good, FIRST)
    first = cli("apply", "--yes", str(old))
    assert first.returncode == 0, first.stdout + first.stderr
    bed.wait_idle(timeout=120)
    loaded_old = good.rsplit("-", 1)[0]
    for node in NODES:
        assert set(bed.run(node, SMI, check=True).stdout.split()) == {loaded_old}, node

    new = write_state(bed.desired_state, tmp_path / "new", broken, CANARY_ROLLOUT)
    (old / "rollout.yaml").write_text(CANARY_ROLLOUT)  # the previous commit, as the daemon would hold it
    boots = {n: bed.run(n, BOOT_ID, check=True).stdout.strip() for n in NODES}
    packages = {n: bed.run(n, PACKAGES, check=True).stdout for n in NODES}
    keeper = (bed.state_dir / "keeper.log").read_text().count("\n")
    ctld = int(bed.run("ctl", "wc -l < /var/log/slurm/slurmctld.log", check=True).stdout)

    done = cli("apply", "--yes", "--previous", str(old), str(new))
    output = done.stdout + done.stderr
    assert done.returncode == 1, output

    # the canary failed the GPU gate on the broken driver, and the rollout stopped there
    assert re.search(rf"upgrade: {CANARY}: failed \(gpu gate: .*79", output), output
    assert "rollout rolled-back: wave 1: upgrade gate failed" in output, output
    assert "rollout: wave 2/" not in output, output
    # orchestrated: neither the plan nor the wave's apply calls the driver change held (the machine applies it)
    assert ("Upgrades with reboots on gpu[01-04]: node by node, 1 at a time now (max_unavailable 1 of 4 = 1, none "
            "unavailable now), gated by gpu (rollout.upgrade)" in output), output
    assert "held, not applied" not in output and "--allow" not in output, output
    # rolled back: the journalled undo downgraded the pair, a second reboot loaded 550 again
    assert f"upgrade: {CANARY}: rolled-back" in output, output
    assert bed.run(CANARY, PACKAGES, check=True).stdout == packages[CANARY]
    assert set(bed.run(CANARY, SMI, check=True).stdout.split()) == {loaded_old}
    assert bed.run(CANARY, BOOT_ID, check=True).stdout.strip() != boots[CANARY]
    booted = (bed.state_dir / "keeper.log").read_text().splitlines()[keeper:]
    assert len([line for line in booted if f" {CANARY}: booted in " in line]) == 2, booted
    # left drained for a human, the reason naming the failure and the rollback; the output says so
    line = bed.run("ctl", f"scontrol show node -o {CANARY}", check=True).stdout
    assert "DRAIN" in field(line, "State"), line
    reason = field(line, "Reason")
    assert reason.startswith("reconciler: upgrade ") and " failed: gpu gate: " in reason, reason
    assert "79" in reason and "rolled back" in reason, reason
    told = re.search(rf"^{CANARY}: left drained for a human: (.*)$", output, re.M)
    assert told and "xid 79" in told.group(1) and told.group(1).endswith("; rolled back"), output
    assert "rolled back gpu01 to the --previous state" in output and "to None" not in output, output
    # nobody else was touched: same boot, same packages, never drained
    for node in OTHERS:
        assert bed.run(node, BOOT_ID, check=True).stdout.strip() == boots[node], node
        assert bed.run(node, PACKAGES, check=True).stdout == packages[node], node
        assert f"upgrade: {node}:" not in output, output
        state = field(bed.run("ctl", f"scontrol show node -o {node}", check=True).stdout, "State")
        assert "DRAIN" not in state, (node, state)
    assert not [line for line in booted if f" {CANARY}: " not in line], booted
    log = bed.run("ctl", f"tail -n +{ctld + 1} /var/log/slurm/slurmctld.log", check=True).stdout
    touched = re.findall(r"update_node: node (gpu\d+) (?:reason set to|state set to)", log)
    assert set(touched) == {CANARY}, log
