"""The fault-injection suite (issue 22): seeded, reproducible fault points; a fast subset by default.

`python -m pytest tests/faults -q` runs each fault a few times (what CI runs); `--full` (or
RECONCILER_FAULTS_FULL=1) runs every fault at least 10 times (20 SIGKILL points). RECONCILER_FAULTS_SEED picks
the seed (default 22): the same seed injects at the same points.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator

import pytest

from tests.daemon.harness import GitRemote
from tests.engine.testbed_state import write_state
from tests.faults.bed import COMPUTES, FaultBed, payload_yaml
from tests.faults.record import FaultTally
from tests.testbed_fixture import Testbed

DEFAULT_SEED = 22


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
    """A random generator seeded by the suite seed and the test's name (same points on every run)."""
    return random.Random(f"{fault_seed}:{request.node.name}")


@pytest.fixture
def repeats(full_run: bool) -> Callable[[int, int], int]:
    """repeats(fast, full): how many times to inject in this run."""
    return lambda fast, full: full if full_run else fast


@pytest.fixture
def tally(fault_seed: int) -> Iterator[Callable[[str], FaultTally]]:
    """tally(fault) -> a FaultTally written to the results file when the test ends (pass or fail)."""
    made: list[FaultTally] = []

    def make(fault: str) -> FaultTally:
        made.append(FaultTally(fault, fault_seed))
        return made[-1]

    yield make
    for one in made:
        one.write()



@pytest.fixture(scope="package")
def fbed(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> FaultBed:
    """A bare 3-compute testbed converged once by `reconciler apply`, with its desired state also in Git."""
    testbed = testbed_factory(nodes=len(COMPUTES), bare=True)
    desired = write_state(tmp_path_factory.mktemp("desired"), name="rtflt", state_dir=testbed.state_dir,
                          subnet=testbed.subnet, computes="gpu[01-03]")
    (desired / "faults.yaml").write_text(payload_yaml(0))
    root = tmp_path_factory.mktemp("faults")
    bed = FaultBed(testbed, desired, GitRemote.create(root, desired), root)
    assert bed.converge(timeout=300) is not None, "the fault testbed did not converge"
    return bed
