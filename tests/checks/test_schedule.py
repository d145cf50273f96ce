"""Which checks are due: intervals and daily slots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reconciler.checks.schedule import due_checks, is_due
from reconciler.model import DesiredState

NOW = datetime(2026, 11, 21, 10, 30, tzinfo=UTC)


def test_intervals() -> None:
    assert is_due("10m", None, NOW)
    assert not is_due("10m", NOW - timedelta(minutes=9, seconds=59), NOW)
    assert is_due("10m", NOW - timedelta(minutes=10), NOW)
    assert not is_due(None, None, NOW)


def test_daily_slot() -> None:
    assert is_due("daily 02:00", NOW - timedelta(hours=9), NOW)  # last ran yesterday 01:30
    assert not is_due("daily 02:00", NOW - timedelta(hours=8), NOW)  # ran today 02:30
    assert not is_due("daily 23:00", NOW - timedelta(hours=11), NOW)  # ran yesterday 23:30, next slot tonight
    assert is_due("daily 23:00", NOW - timedelta(hours=12), NOW)  # ran yesterday 22:30, missed 23:00


def test_due_checks_of_a_state() -> None:
    state = DesiredState.model_validate({
        "cluster": {"name": "c", "slurm_version": "23.11", "controllers": ["ctl"]},
        "nodes": [{"name": "ctl"}, {"name": "gpu[01-02]"}],
        "checks": {"node": [{"name": "basics", "nodes": "gpu[01-02]", "interval": "5m"}],
                   "nccl": [{"name": "nightly", "nodes": "gpu[01-02]", "schedule": "daily 02:00"},
                            {"name": "manual", "nodes": "gpu[01-02]"}]}})
    assert due_checks(state, {}, NOW) == ["basics", "nightly"]
    assert due_checks(state, {"basics": NOW - timedelta(minutes=1), "nightly": NOW - timedelta(hours=1)}, NOW) == []


def test_an_interval_since_this_process_started_the_check_ignores_wall_clock_jumps() -> None:
    """With the monotonic seconds since the check last started here, a wall clock set back (last run "in the
    future") or forward changes nothing: the interval decides (no storm, no stop; issue 22, clock-jump fault)."""
    future = NOW + timedelta(hours=1)  # the wall clock was set back an hour after the last run
    assert not is_due("10m", future, NOW, ago=30.0)
    assert is_due("10m", future, NOW, ago=600.0)
    assert not is_due("10m", NOW - timedelta(hours=2), NOW, ago=30.0)  # set forward two hours
    assert is_due("10m", future, NOW)  # no monotonic record (a fresh daemon): the wall clock, once
    assert not is_due("daily 02:00", NOW - timedelta(hours=8), NOW, ago=30.0)  # daily: the wall clock decides
