"""The bench smoke test uses real Slurm's scontrol (tests/desired_fixtures.py)."""

from tests.desired_fixtures import scontrol  # noqa: F401 - a fixture
