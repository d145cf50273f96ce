"""The fault-injection suite (issue 22): seeded, reproducible fault points; a fast subset by default.

`python -m pytest tests/faults -q` runs each fault a few times (what CI runs); `--full` (or
RECONCILER_FAULTS_FULL=1) runs every fault at least 10 times (20 SIGKILL points). RECONCILER_FAULTS_SEED picks
the seed (default 22): the same seed injects at the same points.

The Slurm-facing faults (SLURM_FACING) run on a testbed of each Slurm release (SLURM_RELEASES); the others (Git
remote, state directory, clock) do not depend on Slurm and run on the host's release only, to keep CI short.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator

import pytest

from tests.daemon.harness import GitRemote
from tests.engine.testbed_state import write_state
from tests.faults.bed import COMPUTES, FaultBed, payload_yaml
from tests.faults.daemon_helpers import Daemons
from tests.faults.record import FaultTally
from tests.testbed_fixture import SLURM_RELEASES, Testbed, host_release

DEFAULT_SEED = 22
# Faults whose outcome goes through Slurm's daemons or tools (reconfigure, drains, slurmd restarts, munge, node
# reboots): these run on every release; the closing whole-payload check runs after each release's faults.
SLURM_FACING = {
    "test_daemon_sigkilled_at_random_points_of_an_apply", "test_node_rebooted_while_the_fact_agent_runs",
    "test_slurmctld_stopped_when_a_reconfigure_is_due", "test_munge_stopped_on_a_node",
    "test_munge_stopped_on_the_controller_reconfigure_is_not_lost", "test_node_rebooted_while_facts_are_gathered",
    "test_payload_is_whole_everywhere_at_the_end",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """fbed's release: every release for the Slurm-facing faults, the host's for the rest."""
    if "fbed" in metafunc.fixturenames:
        releases = SLURM_RELEASES if metafunc.function.__name__ in SLURM_FACING else (
            host_release() or SLURM_RELEASES[0],)
        metafunc.parametrize("fbed", releases, indirect=True, scope="package")


@pytest.fixture(scope="session")
def full_run(request: pytest.FixtureRequest) -> bool:
    """Whether the whole suite was asked for (--full or RECONCILER_FAULTS_FULL=1)."""
    return bool(request.config.getoption("--full", default=False)) or os.environ.get("RECONCILER_FAULTS_FULL") == "1"


@pytest.fixture(scope="session")
def fault_seed() -> int:
    """The suite's seed."""
    return int(os.environ.get("RECONCILER_FAULTS_SEED") or DEFAULT_SEED)


@pytest.fixture
def rng(fault_seed: int, request: pytest.FixtureRequest) -> random.Random:
    """A random generator seeded by the suite seed and the test's name (same points on every run and release)."""
    return random.Random(f"{fault_seed}:{request.node.originalname}")


@pytest.fixture
def repeats(full_run: bool) -> Callable[[int, int], int]:
    """repeats(fast, full): how many times to inject in this run."""
    return lambda fast, full: full if full_run else fast


@pytest.fixture
def tally(fault_seed: int, request: pytest.FixtureRequest) -> Iterator[Callable[[str], FaultTally]]:
    """tally(fault) -> a FaultTally written to the results file when the test ends (pass or fail), its fault named
    with the testbed's Slurm release."""
    made: list[FaultTally] = []
    callspec = getattr(request.node, "callspec", None)
    release = callspec.params.get("fbed") if callspec else None

    def make(fault: str) -> FaultTally:
        made.append(FaultTally(f"{fault} (Slurm {release})" if release else fault, fault_seed))
        return made[-1]

    yield make
    for one in made:
        one.write()



@pytest.fixture(scope="package")
def fbed(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory,
         request: pytest.FixtureRequest) -> FaultBed:
    """A bare 3-compute testbed of the test's Slurm release (see pytest_generate_tests) converged once by
    `reconciler apply`, with its desired state also in Git."""
    testbed = testbed_factory(nodes=len(COMPUTES), bare=True, slurm=request.param)
    desired = write_state(tmp_path_factory.mktemp("desired"), name="rtflt", state_dir=testbed.state_dir,
                          subnet=testbed.subnet, computes="gpu[01-03]", slurm=testbed.slurm)
    (desired / "faults.yaml").write_text(payload_yaml(0))
    root = tmp_path_factory.mktemp("faults")
    bed = FaultBed(testbed, desired, GitRemote.create(root, desired), root)
    assert bed.converge(timeout=300) is not None, "the fault testbed did not converge"
    return bed


@pytest.fixture
def daemons(fbed: FaultBed) -> Iterator[Daemons]:
    """A daemon factory whose daemons are killed when the test ends (the next test starts from a clean slate)."""
    made = Daemons(fbed)
    yield made
    for daemon in made.started:
        daemon.kill()
