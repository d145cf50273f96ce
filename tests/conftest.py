"""Root conftest: the testbed fixtures (tests/testbed_fixture.py) for every integration test."""

import pytest

pytest_plugins = ["tests.testbed_fixture", "tests.wheel_fixture"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """--full: run the fault-injection suite (tests/faults) in full, every fault at least 10 times."""
    parser.addoption("--full", action="store_true", default=False,
                     help="tests/faults: inject every fault at least 10 times (default: a fast seeded subset)")
