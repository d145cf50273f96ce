"""A driver upgrade that needs a reboot, node by node, on the testbed (real Slurm 22.05 and 24.11, real apt/dpkg over
real SSH, the testbed's reboot through Slurm's RebootProgram; the packages and nvidia-smi are the testbed's
STAND-INS): 8 nodes move 550 -> 570 with `rollout.upgrade: {max_unavailable: 2}` while jobs run on 2 of them."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from functools import cmp_to_key
from pathlib import Path

import pytest

from reconciler.common.versions import deb_compare
from tests.rollout.upgrade_bed import DRIVER, cli, field, pair
from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
NODES = [f"gpu{i:02d}" for i in range(1, 9)]
BUSY = ["gpu07", "gpu08"]
UPGRADE = """rollout:
  waves: all
  upgrade:
    max_unavailable: 2
    failure_budget: 0
    drain_timeout: 5m
    reboot_timeout: 2m
    driver_package: nvidia-driver-standin
    gates: [gpu]
"""


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def bed(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed]) -> Iterator[Testbed]:
    """8 compute nodes, Slurm of each release, the package repository (torn down after the release's test)."""
    testbed = testbed_factory(nodes=8, packages=True, slurm=request.param)
    testbed.wait_idle(timeout=120)
    yield testbed
    testbed.down()


def most_out_at_once(output: str) -> int:
    """The most nodes between `draining` and `done` at any moment, from the upgrade's log lines."""
    out: set[str] = set()
    most = 0
    for node, state in re.findall(r"upgrade: (gpu\d+): ([a-z-]+)", output):
        if state == "draining":
            out.add(node)
        elif state in ("done", "failed"):
            out.discard(node)
        most = max(most, len(out))
    return most


def test_driver_550_to_570_node_by_node_with_jobs_on_two(bed: Testbed, tmp_path: Path) -> None:
    """Waves of max_unavailable 2; the busy nodes reboot only after their jobs end (completed, exit 0); every node
    comes back reporting 570 (stand-in nvidia-smi), passes the GPU gate and is resumed; the second plan is empty."""
    desired = tmp_path / "desired"
    shutil.copytree(bed.desired_state, desired)
    versions = sorted(bed.package_manifest["deb"]["standin"][DRIVER], key=cmp_to_key(deb_compare))
    old, new = versions[0], versions[-1]
    (desired / "packages.yaml").write_text(pair(old, "gpu[01-08]"))
    first = cli("apply", "--yes", str(desired))
    assert first.returncode == 0, first.stdout + first.stderr

    (desired / "rollout.yaml").write_text(UPGRADE)
    (desired / "packages.yaml").write_text(pair(new, "gpu[01-08]", "reboot"))
    boots = {n: bed.run(n, "cat /proc/sys/kernel/random/boot_id", check=True).stdout.strip() for n in NODES}
    jobs = {n: bed.run("ctl", f"sbatch --parsable -w {n} -o /dev/null --wrap 'sleep 30'", check=True).stdout.strip()
            for n in BUSY}
    for job in jobs.values():
        bed.run("ctl", f"for i in $(seq 100); do scontrol show job {job} -o | grep -q JobState=RUNNING && exit 0; "
                       "sleep 0.2; done; exit 1", check=True)
    move = f"{DRIVER} {old} → {new}"
    for fmt in ("text", "markdown"):  # what the admin and the PR comment read: versions, reboots, busy nodes
        plan = cli("plan", "--format", fmt, str(desired))
        assert plan.returncode == 2 and "(needs a reboot)" in plan.stdout, plan.stdout + plan.stderr
        assert "reboots 8 nodes; 2 wait for running jobs" in plan.stdout and move in plan.stdout, plan.stdout

    done = cli("apply", "--yes", str(desired))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert most_out_at_once(output) == 2, output
    for node, job in jobs.items():
        line = bed.run("ctl", f"scontrol show job {job} -o", check=True).stdout
        assert (field(line, "JobState"), field(line, "ExitCode")) == ("COMPLETED", "0:0"), line
        booted = field(bed.run("ctl", f"scontrol show node {node} -o", check=True).stdout, "BootTime")
        assert booted >= field(line, "EndTime"), (node, booted, line)  # ISO times sort
    for node in NODES:
        assert bed.run(node, "cat /proc/sys/kernel/random/boot_id", check=True).stdout.strip() != boots[node]
        smi = bed.run(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader", check=True).stdout
        assert set(smi.split()) == {new.rsplit("-", 1)[0]}, (node, smi)
        # resumed: never drained again; IDLE once slurmctld's next ping clears a NOT_RESPONDING the reboot's
        # dropped RPC may leave (bounded)
        script = (f"for i in $(seq 300); do s=$(scontrol show node {node} -o | grep -o 'State=[^ ]*'); "
                  f"[ \"$s\" = State=IDLE ] && exit 0; case $s in *DRAIN*) break;; esac; sleep 0.2; done; "
                  "echo $s; exit 1")
        state = bed.run("ctl", script, timeout=120)
        assert state.returncode == 0, (node, state.stdout, output)
        shown = bed.run("ctl", f"scontrol show node {node} -o", check=True).stdout
        assert field(shown, "NextState") == "", shown  # no reboot left pending (24.11: NextState=UNDRAIN)
        assert output.count(f"upgrade: {node}: resumed") == 1, output
    again = cli("plan", str(desired))
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr
