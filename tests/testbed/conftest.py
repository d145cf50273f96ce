"""Load the testbed fixtures (tests/testbed_fixture.py) unless the root conftest already did."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Register tests.testbed_fixture as a plugin once."""
    if not config.pluginmanager.has_plugin("tests.testbed_fixture"):
        config.pluginmanager.import_plugin("tests.testbed_fixture")
