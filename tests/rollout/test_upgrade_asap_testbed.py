"""An ASAP reboot someone else asked for, as the upgrade's Slurm steps read it (issue 44 item 6), on the testbed
on both releases: real slurmctld, real `scontrol`.

Observed (24.11.5, no accounting storage): `scontrol reboot ASAP` shows `NextState=UNDRAIN` (22.05:
`NextState=RESUME`), and on a node that still carries a resumed drain's Reason (24.11 keeps it, 22.05 clears it:
tests/facts/test_stale_reason_testbed.py) the ASAP drain takes that old Reason instead of "Reboot ASAP" (scontrol.1
of 24.11 says it sets "Reboot ASAP" when no reason is given; the testbed shows it does so only on a node with no
Reason). So after an upgrade resumed a node, an admin's ASAP reboot of it reads `DRAIN` + `Reason=reconciler:
upgrade ...`: the upgrade took Slurm's reboot drain for its own and would resume it. And a bare `State=[^ ]*DRAIN`
also matches `NextState=UNDRAIN`: a node an admin undrained while its ASAP reboot waits read as drained.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from reconciler.drivers.node_state import drain_steps
from reconciler.drivers.slurm_reboot import reboot_steps, upgrade_reason
from tests.rollout.upgrade_bed import field
from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
COMMIT = "c0ffee123456"
SLOW = 10  # seconds a shutdown spends with slurmd stopped: the reboot the steps are read during


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def bed(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed]) -> Iterator[Testbed]:
    """2 compute nodes of each Slurm release (torn down after the release's tests)."""
    testbed = testbed_factory(nodes=2, slurm=request.param)
    testbed.wait_idle(timeout=120)
    yield testbed
    testbed.down()


def holds(bed: Testbed, command: str) -> bool:
    """Whether one of the steps' shell tests exits 0 on ctl."""
    return bed.run("ctl", command, timeout=60).returncode == 0


def line(bed: Testbed, node: str) -> str:
    """`scontrol show node -o` of NODE."""
    return bed.run("ctl", f"scontrol show node -o {node}", check=True).stdout


def wait(bed: Testbed, node: str, done: Callable[[], bool], timeout: float = 120) -> None:
    """Until DONE() holds, bounded (the assertion shows NODE's line)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, line(bed, node)
        time.sleep(0.3)


def busy(bed: Testbed, node: str) -> str:
    """A job sleeping on NODE (it holds an ASAP reboot back); its id once it runs."""
    job = bed.run("ctl", f"sbatch --parsable -w {node} -o /dev/null --wrap 'sleep 300'", check=True).stdout.strip()
    bed.run("ctl", f"for i in $(seq 150); do scontrol show job {job} -o | grep -q JobState=RUNNING && exit 0; "
                   "sleep 0.2; done; exit 1", check=True)
    return job


def settle(bed: Testbed, node: str, job: str) -> None:
    """Cancel NODE's pending reboot and its job; resume it; wait until it is IDLE."""
    bed.run("ctl", f"scontrol cancel_reboot {node}; scancel {job}; scontrol update nodename={node} state=resume",
            timeout=60)
    wait(bed, node, lambda: field(line(bed, node), "State") == "IDLE", timeout=60)


def test_an_asap_reboot_after_an_upgrade_is_not_the_upgrades_drain(bed: Testbed) -> None:
    """gpu01 went through the upgrade's Slurm steps (drained, rebooted, back drained, resumed); no job ran on it
    since (a job starting clears 24.11's old Reason); an admin's ASAP reboot of it is under way (slurmd stopped for
    SLOW seconds, as a real shutdown takes): drained and rebooting, but the drain is Slurm's reboot's (it lifts it
    itself once the node registers), not the upgrade's."""
    steps = reboot_steps("ctl", "gpu01", COMMIT)
    bed.run("ctl", f"{steps.drain} && {steps.reboot}", check=True)
    wait(bed, "gpu01", lambda: holds(bed, steps.registered) and holds(bed, steps.ours))
    bed.run("ctl", steps.resume, check=True)
    slow = bed.state_dir / "slow-shutdown"  # deploy/testbed/reboot.py SLOW_SHUTDOWN
    slow.write_text(f"{SLOW}\n")
    try:
        bed.run("ctl", "scontrol reboot ASAP gpu01", check=True)
        shown = line(bed, "gpu01")
        verdicts = (holds(bed, steps.drained), holds(bed, steps.pending), holds(bed, steps.ours))
        assert field(line(bed, "gpu01"), "State") == field(shown, "State"), shown  # all read in the same reboot
        assert "DRAIN" in field(shown, "State") and "REBOOT" in field(shown, "State"), shown
        if bed.slurm == "24.11":  # the observation this test exists for
            assert field(shown, "NextState") == "UNDRAIN", shown
            assert field(shown, "Reason").startswith(f"{upgrade_reason(COMMIT)} : reboot issued"), shown
        else:
            assert field(shown, "NextState") == "RESUME" and field(shown, "Reason").startswith("Reboot ASAP"), shown
        # ours failed before on 24.11: the old Reason read as the upgrade's drain
        assert verdicts == (True, True, False), (verdicts, shown)
    finally:
        slow.unlink(missing_ok=True)
    # both releases lift the ASAP drain themselves once the node is back (NextState)
    wait(bed, "gpu01", lambda: field(line(bed, "gpu01"), "State") == "IDLE")


def test_next_state_is_not_read_as_the_nodes_state(bed: Testbed) -> None:
    """An admin undrains gpu02 while its ASAP reboot waits (`NextState=UNDRAIN` on 24.11): not drained."""
    job = busy(bed, "gpu02")
    try:
        bed.run("ctl", "scontrol reboot ASAP gpu02 && scontrol update nodename=gpu02 state=undrain", check=True)
        shown = line(bed, "gpu02")
        assert "DRAIN" not in field(shown, "State") and "REBOOT_REQUESTED" in field(shown, "State"), shown
        assert field(shown, "NextState") == ("UNDRAIN" if bed.slurm == "24.11" else "RESUME"), shown
        # failed before on 24.11: `State=[^ ]*DRAIN` matched `NextState=UNDRAIN`
        assert not holds(bed, reboot_steps("ctl", "gpu02", COMMIT).drained), shown
        assert not holds(bed, drain_steps("ctl", "gpu02").drained), shown
    finally:
        settle(bed, "gpu02", job)
