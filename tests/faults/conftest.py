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

from tests.faults.record import FaultTally

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

