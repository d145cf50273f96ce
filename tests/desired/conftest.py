"""Loader tests: the example desired state copied (tests/desired_fixtures.py)."""

from tests.desired_fixtures import example_copy  # noqa: F401 - a fixture
