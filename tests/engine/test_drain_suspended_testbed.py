"""A suspended job holds its node for every drain that waits for jobs (the rule in drivers/node_state.py
`JOB_STATES`), on the testbed on both releases: real slurmctld, real `squeue`, `scontrol suspend`.

Before, the apply's drain steps (a rolling restart, a step that would end other nodes' jobs) listed RUNNING,
COMPLETING and CONFIGURING jobs only, the upgrade's reboot steps SUSPENDED too: the same suspended job was "no job"
for one and a job for the other. Now both count it, and the wait for it ends only with the job (bounded). The
node's state shows nothing of it: drained, it reads IDLE+DRAIN (DRAINED) with the suspended job on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from reconciler.drivers.node_state import drain_steps
from reconciler.drivers.slurm_reboot import reboot_steps
from reconciler.engine.drain import NodeDrain
from tests.rollout import test_upgrade_asap_testbed as asap
from tests.rollout.upgrade_bed import field
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
bed = asap.bed  # 2 compute nodes of each Slurm release
wait = asap.wait


def on_ctl(bed: Testbed) -> Callable[[str, str], tuple[bool, str]]:
    """NodeDrain's runner: the command on the testbed's controller."""
    def run(host: str, command: str) -> tuple[bool, str]:
        done = bed.run(host, command, timeout=60)
        return done.returncode == 0, done.stdout if done.returncode == 0 else done.stderr
    return run


def test_a_suspended_job_holds_the_node_for_every_drain(bed: Testbed) -> None:
    """A job suspended on gpu01 (scontrol suspend) is a job of the node for the apply's drain steps and the
    upgrade's alike; drained, the node waits for it (bounded, the job left alone); resumed and ended, it is gone."""
    job = bed.run("ctl", "sbatch --parsable -w gpu01 -o /dev/null --wrap 'sleep 300'", check=True).stdout.strip()
    state = f"scontrol show job -o {job}"
    wait(bed, "gpu01", lambda: field(bed.run("ctl", state).stdout, "JobState") == "RUNNING", timeout=60)
    bed.run("ctl", f"scontrol suspend {job}", check=True)
    wait(bed, "gpu01", lambda: field(bed.run("ctl", state).stdout, "JobState") == "SUSPENDED", timeout=60)
    apply_drain = NodeDrain("gpu01", drain_steps("ctl", "gpu01"), on_ctl(bed), poll=0.3)
    upgrade_drain = NodeDrain("gpu01", reboot_steps("ctl", "gpu01", "c0ffee"), on_ctl(bed), poll=0.3)
    try:
        assert apply_drain.jobs() == 1  # 0 before: the apply's steps did not list SUSPENDED
        assert upgrade_drain.jobs() == 1
        assert apply_drain.hold() is True
        began = time.monotonic()
        assert not apply_drain.wait_jobs(3)  # the bound ends the wait, not the job
        assert time.monotonic() - began >= 3
        node = bed.run("ctl", "scontrol show node -o gpu01", check=True).stdout
        # observed on 22.05.8 and 24.11.5: the suspended job's CPUs are released, so the node reads drained and
        # idle (DRAINED, not DRAINING) with the job still on it: its state cannot say it is empty, squeue does
        assert field(node, "State") == "IDLE+DRAIN", node
        assert field(bed.run("ctl", state).stdout, "JobState") == "SUSPENDED"  # never ended by the wait
        bed.run("ctl", f"scontrol resume {job} && scancel {job}", check=True)
        assert apply_drain.wait_jobs(60)
        assert apply_drain.resume(30) is None
        assert not apply_drain.drained()
    finally:
        bed.run("ctl", f"scancel {job}; scontrol update nodename=gpu01 state=resume", timeout=60)
