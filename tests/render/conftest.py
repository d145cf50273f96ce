"""Render tests: the example desired state copied, real Slurm's scontrol (tests/desired_fixtures.py)."""

from tests.desired_fixtures import example_copy, scontrol  # noqa: F401 - fixtures
