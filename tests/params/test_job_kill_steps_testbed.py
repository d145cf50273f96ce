"""Which step of a slurm.conf change ends which running jobs, observed on real daemons of each release, and the
product keeping them (issue 43 items 1 and 2).

A node's CPUs 16 -> 32 with two one-task sleep jobs on gpu01 (one requeueable, the default; one --no-requeue), each
step alone on a fresh start: `scontrol reconfigure`; a slurmctld restart; gpu01's slurmd restarted, drained or
not. Then the product: a CPU change applied by `reconciler apply` while a job runs keeps the job (drained and
waited for before the controller step, resumed after), and a SlurmdPort change restarts slurmd in place, undrained,
with a job running longer than SlurmdTimeout across it. drivers/job_risk.py and docs/slurm-parameters.md cite this.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.params.probe_io import healthy, node_states, poll, read_files, reconfigure, service, sh, write_files
from tests.testbed_fixture import SLURM_RELEASES, Testbed

REPO = Path(__file__).resolve().parents[2]
GONE = ("NODE_FAIL", "PENDING", "REQUEUED", "FAILED", "CANCELLED", "COMPLETED", "COMPLETING")
TRANSIENT = ("COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT")  # states a job passes through, not its fate

# step -> (requeueable job, --no-requeue job) after it, per release: "RUNNING" lived; "requeued" was ended and put
# back in the queue (Restarts=1); "NODE_FAIL" was ended for good.
EXPECTED = {
    "22.05": {"reconfigure": ("RUNNING", "RUNNING"), "slurmctld": ("requeued", "NODE_FAIL"),
              "slurmd": ("RUNNING", "RUNNING"), "slurmd drained": ("RUNNING", "RUNNING")},
    "24.11": {"reconfigure": ("requeued", "NODE_FAIL"), "slurmctld": ("requeued", "NODE_FAIL"),
              "slurmd": ("RUNNING", "RUNNING"), "slurmd drained": ("RUNNING", "RUNNING")},
}


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def bed(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A 2-node testbed of one release."""
    return testbed_factory(nodes=2, slurm=request.param)


def job(bed: Testbed, seconds: int, *flags: str) -> str:
    """A one-task sleep job on gpu01, once it runs."""
    rc, out = sh(bed, "ctl", f"sbatch --parsable -w gpu01 -N1 -n1 -o /dev/null {' '.join(flags)} "
                              f"--wrap 'sleep {seconds}'")
    assert rc == 0, out
    job_id = out.strip().split(";")[0]
    assert poll(lambda: None if fate(bed, job_id)[0] == "RUNNING" else "not yet", 30) is None, fate(bed, job_id)
    return job_id


def fate(bed: Testbed, job_id: str) -> tuple[str, int]:
    """The job's state for slurmctld and how often it was restarted (requeued)."""
    out = sh(bed, "ctl", f"scontrol show job -o {job_id}")[1]
    state, restarts = re.search(r"JobState=(\S+)", out), re.search(r"Restarts=(\d+)", out)
    return (state.group(1) if state else "gone"), int(restarts.group(1)) if restarts else 0


def judged(bed: Testbed, job_id: str) -> str:
    """RUNNING (and its sleep runs on gpu01), requeued, or the state it ended in."""
    state, restarts = fate(bed, job_id)
    if restarts:
        return "requeued"
    return state


def start_over(bed: Testbed, files: dict[str, str | None]) -> None:
    """No job, FILES everywhere, every daemon restarted, both nodes idle."""
    sh(bed, "ctl", "scancel --full $(squeue -h -o %i) 2>/dev/null; true")
    write_files(bed, files)
    service(bed, ["ctl"], "restart", "slurmctld")
    service(bed, bed.computes, "restart", "slurmd")

    def back() -> str | None:
        down = [n for n, s in node_states(bed).items() if re.search(r"drain|drng|down|inval|fail", s)]
        if down:
            sh(bed, "ctl", f"scontrol update nodename={','.join(down)} state=resume")
        return healthy(bed, bed.computes) or (None if sh(bed, "ctl", "squeue -h")[1].strip() == "" else "jobs left")
    assert poll(back, 60, step=0.5) is None, back()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The reconciler CLI."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


def test_each_step_of_a_cpu_change_and_the_jobs_it_ends(bed: Testbed) -> None:
    files = read_files(bed)
    conf = files["slurm.conf"] or ""
    assert "CPUs=16" in conf
    bigger = {**files, "slurm.conf": conf.replace("CPUs=16", "CPUs=32")}
    seen = {}
    try:
        for step in EXPECTED[bed.slurm]:
            start_over(bed, files)
            jobs = (job(bed, 100000), job(bed, 100000, "--no-requeue"))
            if step == "slurmd drained":
                sh(bed, "ctl", "scontrol update nodename=gpu01 state=drain reason=probe")
            write_files(bed, bigger)
            if step == "reconfigure" and bed.slurm == "22.05":  # refused, the files' new count not taken
                out = sh(bed, "ctl", "scontrol reconfigure")[1]
                assert "require restart of the slurmctld daemon" in out, out
            elif step == "reconfigure":
                assert reconfigure(bed, bed.computes) is None
            elif step == "slurmctld":
                service(bed, ["ctl"], "restart", "slurmctld")
            else:
                service(bed, ["gpu01"], "restart", "slurmd")
            # A job slurmctld ends goes at once (its recovery of the job); give a slurmd registration time too.
            poll(lambda ids=jobs: None if any(judged(bed, j) != "RUNNING" for j in ids) else "all alive", 15,
                 step=0.5)
            # A job being ended shows COMPLETING until slurmctld settles its fate (seen on 22.05 under load: the
            # --no-requeue job COMPLETING, NODE_FAIL a moment later): judge the jobs once none is in between.
            settled = poll(lambda ids=jobs: next((f"{j} {judged(bed, j)}" for j in ids
                                                  if judged(bed, j) in TRANSIENT), None), 60, step=0.5)
            assert settled is None, settled
            seen[step] = tuple(judged(bed, j) for j in jobs)
            alive = sh(bed, "gpu01", "pgrep -x sleep | wc -l")[1].strip()
            assert (alive == "2") == (seen[step] == ("RUNNING", "RUNNING")), (step, seen[step], alive)
    finally:
        start_over(bed, files)
    print(f"\n{bed.slurm}: {seen}")
    assert seen == EXPECTED[bed.slurm]


def test_apply_keeps_a_job_through_a_cpu_change_and_restarts_slurmd_in_place_for_slurmdport(
        bed: Testbed, tmp_path: Path) -> None:
    desired = tmp_path / "desired"
    shutil.copytree(bed.desired_state, desired)
    cluster = desired / "cluster.yaml"
    text = cluster.read_text().replace("    SlurmdPort: 6818\n", "    SlurmdPort: 6818\n    SlurmdTimeout: 20\n")
    cluster.write_text(text)
    first = cli("apply", "--yes", str(desired))
    assert first.returncode == 0, first.stdout + first.stderr
    bed.wait_idle()

    # Item 1: CPUs 16 -> 32 while a 20 s job runs on gpu01 (a requeueable one: the default); gpu02 drained by a
    # human (or NHC) beforehand: waited for, never resumed by the apply.
    job_id = job(bed, 20)
    sh(bed, "ctl", "scontrol update nodename=gpu02 state=drain reason='nhc: bad dimm'")
    cluster.write_text(text.replace("CPUs: 16", "CPUs: 32"))
    plan = cli("plan", str(desired))
    step = "the slurmctld restart" if bed.slurm == "22.05" else "`scontrol reconfigure`"
    said = " ".join(plan.stdout.split())
    assert (f"gpu01: changing CPUs while job {job_id} runs there: {step} would end it (requeued to run again from "
            "the start, or NODE_FAIL where it cannot be requeued; observed on 22.05 and 24.11: "
            "tests/params/test_job_kill_steps_testbed.py); apply first drains gpu01 and waits (at most "
            f"--drain-timeout) until it ends, then runs {step} and resumes gpu01") in said, plan.stdout
    assert "first drains gpu[01-02] and waits" in said, plan.stdout
    began = time.monotonic()
    applied = cli("apply", "--yes", "--drain-timeout", "120", str(desired))
    log = applied.stdout + applied.stderr
    assert applied.returncode == 0, log
    lines = [line.strip() for line in applied.stdout.splitlines()]
    controller = "ctl: restart slurmctld" if bed.slurm == "22.05" else "ctl: scontrol reconfigure"
    assert lines.index("ctl: drain gpu01") < lines.index(controller) < lines.index("ctl: resume gpu01"), log
    assert fate(bed, job_id) == ("COMPLETED", 0), (fate(bed, job_id), log)  # ended on its own, never requeued
    assert time.monotonic() - began < 120
    assert "CPUTot=32" in sh(bed, "ctl", "scontrol show node gpu01")[1]
    assert "resume gpu02" not in log
    human = sh(bed, "ctl", "scontrol show node -o gpu02")[1]
    assert "DRAIN" in human and "Reason=nhc: bad dimm" in human, human  # the human's drain stands
    sh(bed, "ctl", "scontrol update nodename=gpu02 state=resume")
    assert poll(lambda: healthy(bed, bed.computes), 30) is None  # gpu01 resumed by the apply

    # Item 2: SlurmdPort 6818 -> 6828 while a job longer than SlurmdTimeout (20 s) runs: slurmd restarts in
    # place, the node is never drained, the job completes.
    job_id = job(bed, 45)
    cluster.write_text(text.replace("CPUs: 16", "CPUs: 32").replace("SlurmdPort: 6818", "SlurmdPort: 6828"))
    plan = cli("plan", str(desired))
    assert "in place on gpu01, not drained: their running jobs keep running" in " ".join(plan.stdout.split())
    assert "will be drained first" not in plan.stdout, plan.stdout
    applied = cli("apply", "--yes", str(desired))
    log = applied.stdout + applied.stderr
    assert applied.returncode == 0, log
    assert "gpu01: restart slurmd" in log and "drain gpu01" not in log, log
    assert sh(bed, "ctl", "nc -z gpu01 6828")[0] == 0  # slurmd listens on the new port
    assert fate(bed, job_id)[0] == "RUNNING"
    assert poll(lambda: None if fate(bed, job_id)[0] != "RUNNING" else "running", 60, step=1) is None
    assert fate(bed, job_id) == ("COMPLETED", 0), log
    assert "drain" not in " ".join(node_states(bed).values())
