"""The smoke job on real Slurm (2 compute nodes): it judges once Slurm has settled, not after a fixed wait.

The testbed's slurm.conf gets a Prolog and an Epilog whose behaviour a flag file on the node picks: fail, or
(epilog) hold until released. Drains are read back from the real slurmctld.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.checks.smoke import JOB_NAME, SmokeResult, SmokeSpec, aborted_tasks, run_smoke
from reconciler.checks.smoke_settle import parse_settle, prolog_failures, settle_command
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.transport.ssh import SSHTransport
from tests.testbed_fixture import Testbed

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(600)]
NODES = ["gpu01", "gpu02"]
PROLOG = """#!/bin/sh
[ -e /etc/slurm/fail-prolog ] && { echo "prolog fails on purpose" >&2; exit 1; }
exit 0
"""
# Held epilogs wait (bounded: 300 s) for the test to remove the flag: no sleep stands for an event here.
EPILOG = """#!/bin/sh
[ -e /etc/slurm/fail-epilog ] && exit 1
i=0
while [ -e /etc/slurm/hold-epilog ] && [ $i -lt 1500 ]; do sleep 0.2; i=$((i+1)); done
exit 0
"""
# What srun 22.05 printed on the testbed when gpu01's prolog failed (the drain came 30 ms after srun exited).
SRUN_PROLOG_FAILED = """srun: Prolog failure on node gpu01
srun: error: Task launch for StepId=1.0 failed on node gpu01: Job prolog failed
srun: error: Application launch failed: Job prolog failed
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
OK gpu02
"""

# What srun 22.05 printed on a loaded CI machine for the same failure: gpu02's task said nothing before the abort.
SRUN_PROLOG_FAILED_SILENT = SRUN_PROLOG_FAILED.replace("OK gpu02\n", "") + (
    "srun: error: Timed out waiting for job step to complete\n")


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """Two compute nodes, Slurm running, with the flag-driven Prolog and Epilog configured."""
    testbed = testbed_factory(nodes=2)
    for node in testbed.nodes:
        testbed.run(node, f"printf '%s' '{PROLOG}' > /etc/slurm/prolog.sh && printf '%s' '{EPILOG}' > "
                    "/etc/slurm/epilog.sh && chmod 755 /etc/slurm/prolog.sh /etc/slurm/epilog.sh && "
                    "printf 'Prolog=/etc/slurm/prolog.sh\\nEpilog=/etc/slurm/epilog.sh\\n' >> /etc/slurm/slurm.conf",
                    check=True)
    testbed.run("ctl", "scontrol reconfigure", check=True)
    wait_for(testbed, "the Prolog in slurmctld's config",
             "scontrol show config | grep -q '^Prolog .*= /etc/slurm/prolog.sh'")
    # A reconfigure reaches each slurmd in its own time: restarted, a slurmd has read the Epilog for sure.
    for node in testbed.computes:
        testbed.run(node, "supervisorctl restart slurmd", check=True)
    wait_for(testbed, "the nodes idle", "[ -z \"$(sinfo -h -N -o '%N %t' | grep -v ' idle$')\" ]")
    return testbed


@pytest.fixture
def smoke(bed: Testbed) -> Iterator[Callable[..., SmokeResult]]:
    """smoke(timeout=60) runs the smoke job on gpu[01-02] over real SSH; flags and drains are cleared after."""
    loaded = load_dir(bed.desired_state)
    transport = SSHTransport(loaded.state.ssh, Path(loaded.root))
    ctl = node_specs(loaded.state)["ctl"]

    def go(timeout: float = 60) -> SmokeResult:
        spec = SmokeSpec(nodes=list(NODES), timeout=timeout, reservation="smoke-test")
        return run_smoke(transport, ctl, ctl, spec)

    yield go
    for node in NODES:
        bed.run(node, "rm -f /etc/slurm/fail-prolog /etc/slurm/fail-epilog /etc/slurm/hold-epilog")
    wait_for(bed, "the smoke jobs to leave squeue", f"[ -z \"$(squeue -h --name={JOB_NAME})\" ]")
    bed.run("ctl", f"scontrol update nodename={','.join(NODES)} state=resume")
    wait_for(bed, "the nodes idle", "[ -z \"$(sinfo -h -N -o '%N %t' | grep -v ' idle$')\" ]")
    transport.close()


def wait_for(bed: Testbed, what: str, condition: str, timeout: int = 120) -> None:
    """Poll a shell CONDITION on ctl until it holds (bounded)."""
    end = time.monotonic() + timeout
    while bed.run("ctl", condition).returncode != 0:
        assert time.monotonic() < end, f"{what}: not after {timeout} s"
        time.sleep(0.2)


def reason(bed: Testbed, node: str) -> str:
    """The node's drain reason in slurmctld (empty when none)."""
    return bed.run("ctl", f"sinfo -h -n {node} -R -o '%E'").stdout.strip()


def test_prolog_failures_are_read_from_sruns_own_words() -> None:
    assert prolog_failures(SRUN_PROLOG_FAILED) == {"gpu01"}
    assert prolog_failures("srun: error: gpu02: task 1: Exited with exit code 1\n") == set()


def test_tasks_a_prolog_failure_aborted_are_not_blamed_whether_killed_or_silent() -> None:
    # gpu01 is failed already (drained), gpu02 said OK: nobody else to excuse.
    assert aborted_tasks(SRUN_PROLOG_FAILED, NODES, {"gpu01", "gpu02"}) == set()
    assert aborted_tasks(SRUN_PROLOG_FAILED_SILENT, NODES, {"gpu01"}) == {"gpu02"}
    killed = "srun: error: gpu02: task 1: Killed\n"
    assert aborted_tasks(killed, NODES, set()) == {"gpu02"}
    # No abort, no Killed/Terminated line: a silent node is not excused (its own fault fails it).
    assert aborted_tasks("srun: error: gpu02: task 1: Exited with exit code 1\n", NODES, set()) == set()


def test_settle_command_reads_the_view_and_our_jobs_left() -> None:
    command = settle_command(JOB_NAME, "r1")
    assert "--name=reconciler-smoke" in command and "--reservation=r1" in command
    output = ("@@reconciler-begin nodes\nNodeName=gpu01 State=IDLE+COMPLETING Partitions=debug\n"
              "@@reconciler-end nodes 0\n@@reconciler-begin jobs\n@@reconciler-end jobs 0\n"
              "@@reconciler-begin ours\n7 COMPLETING gpu01\n@@reconciler-end ours 0\n")
    view, jobs = parse_settle(output)
    assert view.error is None and jobs == ["7 COMPLETING gpu01"]
    failed = output.replace("7 COMPLETING gpu01\n@@reconciler-end ours 0", "squeue: error: x\n@@reconciler-end ours 1")
    view, jobs = parse_settle(failed)
    assert jobs is None and view.error is not None and "squeue: error: x" in view.error


def test_a_passing_job_passes_and_drains_nothing(bed: Testbed, smoke: Callable[..., SmokeResult]) -> None:
    result = smoke()
    assert result.ok, result.message
    assert result.message.startswith("smoke job passed on gpu[01-02]") and not result.failed
    assert reason(bed, "gpu01") == "" and reason(bed, "gpu02") == ""


def test_a_failing_prolog_is_judged_with_the_drain_slurm_records(bed: Testbed,
                                                                  smoke: Callable[..., SmokeResult]) -> None:
    bed.run("gpu01", "touch /etc/slurm/fail-prolog", check=True)
    result = smoke()
    assert not result.ok
    # The gate waited for the drain srun's "prolog failed" promised: it is in the verdict, not found later.
    assert result.drained.get("gpu01", "").startswith("Prolog error"), result
    assert result.failed["gpu01"].startswith("drained by Slurm: Prolog error"), result.failed
    assert "gpu02" not in result.failed
    assert reason(bed, "gpu01").startswith("Prolog error")


def test_a_failing_epilog_is_judged_with_its_drain(bed: Testbed, smoke: Callable[..., SmokeResult]) -> None:
    bed.run("gpu02", "touch /etc/slurm/fail-epilog", check=True)
    result = smoke()
    assert not result.ok and set(result.failed) == {"gpu02"}, result
    assert result.failed["gpu02"].startswith("drained by Slurm: Epilog error")


def test_an_epilog_still_running_at_the_limit_fails_the_gate(bed: Testbed,
                                                             smoke: Callable[..., SmokeResult]) -> None:
    # Before: the old wait returned at its limit with the node still COMPLETING and, no drain seen, passed.
    bed.run("gpu02", "touch /etc/slurm/hold-epilog", check=True)
    result = smoke(timeout=20)
    assert not result.ok, result.message
    assert "still COMPLETING after 20 s" in result.failed.get("gpu02", ""), result.failed
    assert reason(bed, "gpu02") == ""  # nothing drained: the gate says what it saw, no more
