"""Reboot of a testbed node (issue 34, item 4): Slurm's RebootProgram asks the testbed's keeper (deploy/testbed/
reboot.py), which ends every process of the node and boots it again: new boot id, boot clock from zero, /tmp fresh,
disk kept, slurmd registered again. Slurm itself waits for the running job; the other node is untouched."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.rollout.upgrade_bed import field
from tests.testbed_fixture import Testbed, _testbed_cli

pytestmark = pytest.mark.testbed

BOUND = 120.0  # seconds: a reboot takes about 2 s on a quiet machine (deploy/testbed/README.md)


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A 2-node testbed with Slurm running."""
    testbed = testbed_factory(nodes=2)
    testbed.wait_idle()
    return testbed


def ended(pid: int) -> bool:
    """Whether host PID PID has exited (gone, or a zombie no one has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def boot_id(bed: Testbed, node: str) -> str:
    """The node's /proc/sys/kernel/random/boot_id as its processes read it."""
    return bed.run(node, "cat /proc/sys/kernel/random/boot_id", check=True).stdout.strip()


def node_line(bed: Testbed, node: str) -> str:
    """`scontrol show node NODE -o` on ctl."""
    return bed.run("ctl", f"scontrol show node {node} -o", check=True).stdout


def job_line(bed: Testbed, job: str) -> str:
    """`scontrol show job JOB -o` on ctl."""
    return bed.run("ctl", f"scontrol show job {job} -o", check=True).stdout


def poll(what: str, done: Callable[[], bool], timeout: float = BOUND) -> None:
    """Wait until DONE() is true, bounded by TIMEOUT."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.2)


def submit(bed: Testbed, node: str, seconds: int) -> str:
    """A batch job sleeping SECONDS on NODE; its id once it is RUNNING."""
    job = bed.run("ctl", f"sbatch --parsable -w {node} -o /dev/null --wrap 'sleep {seconds}'",
                  check=True).stdout.strip()
    poll(f"job {job} running", lambda: field(job_line(bed, job), "JobState") == "RUNNING")
    return job


def test_nextstate_drain_is_refused_by_slurm_22_05(bed: Testbed) -> None:
    """Slurm 22.05 knows nextstate=RESUME|DOWN only: `scontrol reboot ASAP nextstate=DRAIN` is refused, nothing
    happens (the drained-reboot recipe is in the next test)."""
    before = boot_id(bed, "gpu01")
    proc = bed.run("ctl", 'scontrol reboot ASAP nextstate=DRAIN reason="reconciler: x" gpu01')
    assert proc.returncode != 0 and "Invalid state: DRAIN" in proc.stdout + proc.stderr
    assert field(node_line(bed, "gpu01"), "State") == "IDLE" and boot_id(bed, "gpu01") == before


def test_drained_reboot_waits_for_the_job_then_comes_back_drained(bed: Testbed) -> None:
    """Drain with a reason, `scontrol reboot`: Slurm waits for gpu01's job (it completes, exit 0), then its
    RebootProgram reboots gpu01: new boot id, uptime from zero, /tmp fresh, disk kept, back DRAINED with the
    reason; gpu02 and its job untouched; resume makes gpu01 idle."""
    old_id, other_id = boot_id(bed, "gpu01"), boot_id(bed, "gpu02")
    old_pid1, other_pid1 = bed.pid1("gpu01"), bed.pid1("gpu02")
    other_slurmd = bed.host_pids("gpu02", "slurmd")
    bed.run("gpu01", "touch /tmp/before-reboot /root/before-reboot", check=True)
    busy = submit(bed, "gpu01", 6)
    other = submit(bed, "gpu02", 600)

    bed.run("ctl", 'scontrol update nodename=gpu01 state=drain reason="reconciler: driver 570" '
                   "&& scontrol reboot gpu01", check=True)
    assert boot_id(bed, "gpu01") == old_id  # the job still runs: no reboot yet
    poll("gpu01 rebooted and registered", lambda: bed.pid1("gpu01") != old_pid1
         and field(node_line(bed, "gpu01"), "State") == "IDLE+DRAIN")

    done = job_line(bed, busy)
    assert field(done, "JobState") == "COMPLETED" and field(done, "ExitCode") == "0:0"  # not killed
    line = node_line(bed, "gpu01")
    assert field(line, "Reason").startswith("reconciler: driver 570 : reboot issued")
    assert field(line, "BootTime") >= field(done, "EndTime")  # booted after the job ended (ISO times sort)
    assert ended(old_pid1)
    new_id = boot_id(bed, "gpu01")
    assert new_id != old_id and re.fullmatch(r"[0-9a-f-]{36}", new_id)
    assert float(bed.run("gpu01", "cut -d' ' -f1 /proc/uptime", check=True).stdout) < BOUND  # a fresh boot clock
    assert bed.run("gpu01", "test -e /tmp/before-reboot").returncode != 0  # /tmp is a new tmpfs
    bed.run("gpu01", "test -e /root/before-reboot", check=True)  # the disk (upper layer) survives

    assert (boot_id(bed, "gpu02"), bed.pid1("gpu02"), bed.host_pids("gpu02", "slurmd")) == (
        other_id, other_pid1, other_slurmd)
    assert field(job_line(bed, other), "JobState") == "RUNNING"
    bed.run("ctl", f"scancel {other}", check=True)

    bed.run("ctl", "scontrol update nodename=gpu01 state=resume", check=True)
    poll("gpu01 idle after resume", lambda: field(node_line(bed, "gpu01"), "State") == "IDLE")
    assert field(node_line(bed, "gpu01"), "Reason") == ""


def test_testbed_reboot_cli_prints_the_new_boot_id(bed: Testbed) -> None:
    """`testbed reboot NODE`: the old PID 1 and its processes end, the new boot id is printed, slurmd registers."""
    old_id, old_pid1 = boot_id(bed, "gpu02"), bed.pid1("gpu02")
    old_sshd = bed.host_pids("gpu02", "sshd")
    proc = _testbed_cli("reboot", "--name", bed.name, "gpu02", timeout=BOUND)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == boot_id(bed, "gpu02") != old_id
    assert bed.pid1("gpu02") != old_pid1 and ended(old_pid1) and all(ended(p) for p in old_sshd)
    bed.wait_idle(timeout=BOUND)
    refused = _testbed_cli("reboot", "--name", bed.name, "ctl", timeout=BOUND)
    assert refused.returncode == 1 and "only compute nodes" in refused.stderr
