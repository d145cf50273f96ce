"""Issue 46 item 3 on the testbed (real Slurm 22.05 with its eight gres GPUs per node, real apt/dpkg over real SSH,
the reboot through Slurm's RebootProgram; the driver packages and nvidia-smi are the testbed's STAND-INS):
`mode: reservation` and `requeue: [batch]` on gpu01, which runs a long job of partition debug (1 GPU, time limit
2 min) and a job of partition batch (1 GPU, time limit 30 min).

- The upgrade makes the maintenance reservation `reconciler-upgrade-gpu01` starting at the long job's EndTime (the
  batch job, to be requeued, does not push it later) and does not drain the node.
- Short jobs pinned to gpu01, queued after the reservation exists, run there on its free GPUs before the
  reservation starts; a job whose time limit reaches into the reservation does not start there (Slurm's doing).
- The long job completes by itself, 0:0, never requeued; then the node is drained, the batch job (only it) is
  requeued, gpu01 is rebooted, gated, its reservation deleted, resumed; the held job then runs on it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.rollout.upgrade_bed import REPO, field, package_bed, pair, poll, seeded, versions
from tests.testbed_fixture import Testbed

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(900)]
RESERVATION = "reconciler-upgrade-gpu01"
ROLLOUT = """rollout:
  waves: all
  upgrade:
    mode: reservation
    requeue: [batch]
    max_unavailable: 1
    drain_timeout: 5m
    reboot_timeout: 4m
    driver_package: nvidia-driver-standin
    gates: [gpu]
"""


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Iterator[Testbed]:
    """2 compute nodes, Slurm 22.05, the package repository."""
    testbed = package_bed(testbed_factory, 2)
    yield testbed
    testbed.down()


def submit(bed: Testbed, args: str) -> str:
    """sbatch ARGS on the controller; the job id."""
    out = bed.run("ctl", f"cd /tmp && sbatch --parsable {args}", check=True).stdout
    return out.strip().split(";")[0]


def job(bed: Testbed, job_id: str) -> str:
    """`scontrol show job -o` of JOB_ID (slurmctld keeps a finished job MinJobAge, 300 s by default)."""
    return bed.run("ctl", f"scontrol show job -o {job_id}", check=True).stdout


def test_reservation_mode_lets_short_jobs_use_the_free_gpus_until_the_long_job_ends_and_requeues_only_batch(
        bed: Testbed, tmp_path: Path) -> None:
    old, new = versions(bed)
    desired = seeded(bed, tmp_path, pair(old, "gpu[01-02]"))  # also makes partition batch (cluster.yaml)
    long = submit(bed, "-w gpu01 -p debug --gres=gpu:1 --time=2 --wrap 'sleep 45'")
    batch = submit(bed, "-w gpu01 -p batch --gres=gpu:1 --time=30 --wrap 'sleep 1200'")
    poll("both jobs running on gpu01", lambda: all(field(job(bed, j), "JobState") == "RUNNING"
                                                   for j in (long, batch)), 60)
    long_end = field(job(bed, long), "EndTime")

    (desired / "rollout.yaml").write_text(ROLLOUT)
    (desired / "packages.yaml").write_text(pair(new, "gpu01", "reboot") + pair(old, "gpu02")
                                           .removeprefix("packages:\n"))
    apply = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "apply", "--yes", str(desired)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        shown = poll("the reservation", lambda: bed.run("ctl", f"scontrol show res -o {RESERVATION}").stdout
                     if bed.run("ctl", f"scontrol show res -o {RESERVATION}").returncode == 0 else "", 300)
        start = field(shown, "StartTime")
        assert start == long_end and "MAINT" in field(shown, "Flags"), (shown, long_end)
        node = bed.run("ctl", "scontrol show node -o gpu01", check=True).stdout
        assert "DRAIN" not in field(node, "State"), node  # not drained: jobs may still start on it
        shorts = [submit(bed, f"-w gpu01 --gres=gpu:{n} --time=1 --wrap 'sleep 5'") for n in (2, 3, 2)]
        held = submit(bed, "-w gpu01 --gres=gpu:1 --time=10 --wrap 'sleep 2'")  # reaches into the reservation
        poll("the short jobs ran", lambda: all(field(job(bed, j), "JobState") == "COMPLETED" for j in shorts), 120)
        assert field(job(bed, held), "JobState") == "PENDING", job(bed, held)
        output, _ = apply.communicate(timeout=600)
    finally:
        if apply.poll() is None:
            apply.kill()
    assert apply.returncode == 0, output
    assert ("gated by gpu; a busy node is reserved from when its jobs are expected to end (mode reservation), its "
            "free GPUs taking jobs until then; jobs of partition batch are requeued, not waited for (rollout.upgrade)"
            in output), output

    for short in shorts:
        record = job(bed, short)
        assert field(record, "NodeList") == "gpu01" and field(record, "ExitCode") == "0:0", record
        assert field(record, "StartTime") < start, (record, start)  # before the reservation started
    record = job(bed, long)
    assert (field(record, "JobState"), field(record, "ExitCode"), field(record, "Restarts")) == (
        "COMPLETED", "0:0", "0"), record
    record = job(bed, batch)
    assert field(record, "Restarts") == "1" and " Partition=batch " in record, record
    assert f"upgrade: gpu01: requeued {batch} (partitions batch)" in output, output
    assert f"upgrade: gpu01: requeued {long}" not in output

    lines = [line for line in output.splitlines() if "upgrade: gpu01:" in line]
    said = [next(i for i, line in enumerate(lines) if words in line) for words in (
        f"reservation {RESERVATION} starts {start}", "drained: its reservation started or no job it waits for",
        "rebooting", f"reservation {RESERVATION} deleted", "resumed")]
    assert said == sorted(said), lines
    assert bed.run("ctl", f"scontrol show res -o {RESERVATION}").returncode != 0  # deleted
    node = bed.run("ctl", "scontrol show node -o gpu01", check=True).stdout
    assert "DRAIN" not in field(node, "State"), node
    smi = bed.run("gpu01", "nvidia-smi --query-gpu=driver_version --format=csv,noheader", check=True).stdout
    assert set(smi.split()) == {new.rsplit("-", 1)[0]}, smi
    poll("the held job ran on gpu01 after the resume",
         lambda: field(job(bed, held), "JobState") == "COMPLETED", 120)
    bed.run("ctl", "scancel -u root")
    time.sleep(1)
