"""Root conftest: the testbed fixtures (tests/testbed_fixture.py) for every integration test, and the grouping of
tests for pytest-xdist (the README's command runs three workers with --dist loadgroup)."""

from pathlib import Path

import pytest

pytest_plugins = ["tests.testbed_fixture", "tests.wheel_fixture"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """--full: run the fault-injection suite (tests/faults) in full, every fault at least 10 times."""
    parser.addoption("--full", action="store_true", default=False,
                     help="tests/faults: inject every fault at least 10 times (default: a fast seeded subset)")


TESTS = Path(__file__).resolve().parent
# Packages whose tests share a package-scoped testbed (their conftest.py): all their files run on one worker, in
# order, as they do without xdist. Every other test file is a group of its own (its module fixtures stay whole).
PACKAGE_GROUPS = {"daemon", "engine", "faults", "rollout"}


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the marks into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its xdist group: its package for PACKAGE_GROUPS, else its file."""
    for item in items:
        try:
            rel = Path(str(item.fspath)).resolve().relative_to(TESTS)
        except ValueError:
            continue
        group = rel.parts[0] if len(rel.parts) > 1 and rel.parts[0] in PACKAGE_GROUPS else rel.as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
