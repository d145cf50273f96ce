"""When checks are due: node checks every `interval`, NCCL checks on their `schedule` (an interval or 'daily HH:MM').

Pure: the daemon passes when each check last ran (`store.last_started(conn)`) and the current time.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from reconciler.model import DesiredState, parse_duration


def _daily_slot(schedule: str, now: datetime) -> datetime:
    """The latest 'daily HH:MM' moment at or before now (in now's timezone)."""
    hours, minutes = (int(part) for part in schedule.split()[1].split(":"))
    slot = now.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    return slot if slot <= now else slot - timedelta(days=1)


def is_due(schedule: str | None, last: datetime | None, now: datetime, ago: float | None = None) -> bool:
    """Whether a check with this interval or daily schedule should run now, given when it last ran.

    AGO: seconds on a monotonic clock since this process last started it, where known: an interval is then
    measured on it (a wall clock set back or forward changes nothing); otherwise, and for daily schedules, on
    the wall clock (LAST, from the results store).
    """
    if schedule is None:
        return False
    if ago is not None and not schedule.startswith("daily "):
        return ago >= parse_duration(schedule)
    if last is None:
        return True
    if schedule.startswith("daily "):
        return last < _daily_slot(schedule, now)
    since = now - last
    # a clock set back (last run "in the future"): run now rather than wait for the old time to come back
    return since < timedelta(0) or since >= timedelta(seconds=parse_duration(schedule))


def due_checks(state: DesiredState, last_run: Mapping[str, datetime], now: datetime,
               ago: Mapping[str, float] | None = None) -> list[str]:
    """Names of the checks due now; an NCCL check without a schedule runs only on demand or after an apply.

    AGO: check -> monotonic seconds since this process last started it (see is_due)."""
    ago = ago or {}
    names = [c.name for c in state.checks.node if is_due(c.interval, last_run.get(c.name), now, ago.get(c.name))]
    return names + [c.name for c in state.checks.nccl
                    if is_due(c.schedule, last_run.get(c.name), now, ago.get(c.name))]
