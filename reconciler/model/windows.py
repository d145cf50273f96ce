"""Desired-state schema of a maintenance window (`rollout.windows`): days, start and end, a time zone.

The arithmetic (inside, next opening, daylight saving) is reconciler/common/windows.py; the rollout's use of it
reconciler/rollout/windows.py. One type for every window (the rollout's now, promotion's next).
"""

from __future__ import annotations

import re
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import Field, field_validator, model_validator

from reconciler.common.windows import DAYS, Span
from reconciler.model.base import Strict

_TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$|^24:00$")
_RANGE = re.compile(r"^([a-z]{3})-([a-z]{3})$")


def _minutes(value: str) -> int:
    hours, minutes = value.split(":")
    return int(hours) * 60 + int(minutes)


class Window(Strict):
    """A maintenance window: on DAYS from START to END (wall clock in TIMEZONE); an END not after START crosses
    midnight and belongs to the day it starts."""

    days: list[str] = Field(default_factory=lambda: list(DAYS), min_length=1, description="Days it starts on: "
                            "mon..sun, or a range like mon-fri (default: every day)")
    start: str = Field(description="Opens at HH:MM (24-hour clock)")
    end: str = Field(description="Closes at HH:MM (24:00: midnight at the end of the day); not after start: "
                     "the next day")
    timezone: str = Field(default="UTC", description="IANA time zone of start and end (e.g. Europe/Berlin)")

    @field_validator("days", mode="before")
    @classmethod
    def _days(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return value
        out: list[str] = []
        for item in value:
            if not isinstance(item, str):
                raise ValueError(f"a day is one of {', '.join(DAYS)} or a range like mon-fri, got {item!r}")
            day = item.strip().lower()
            ranged = _RANGE.match(day)
            if ranged and ranged.group(1) in DAYS and ranged.group(2) in DAYS:
                first, last = DAYS.index(ranged.group(1)), DAYS.index(ranged.group(2))
                span = range(first, last + 1) if first <= last else [*range(first, 7), *range(0, last + 1)]
                out += [DAYS[i] for i in span]
            elif day in DAYS:
                out.append(day)
            else:
                raise ValueError(f"unknown day {item!r}: one of {', '.join(DAYS)}, or a range like mon-fri")
        if len(set(out)) != len(out):
            raise ValueError(f"a day is listed twice in {value}")
        return out

    @field_validator("start", "end", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        if not isinstance(value, str) or not _TIME.match(value.strip()):
            raise ValueError(f"a time is HH:MM on a 24-hour clock (00:00 to 24:00), got {value!r}")
        return value.strip()

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            close = [z for z in sorted(available_timezones()) if z.lower() == value.lower()]
            raise ValueError(f"unknown time zone {value!r}: an IANA name like Europe/Berlin or UTC"
                             + (f" (did you mean {close[0]}?)" if close else "")) from None
        return value

    @model_validator(mode="after")
    def _length(self) -> Window:
        if self.start == "24:00":
            raise ValueError("a window starts at 23:59 at the latest (24:00 is only an end)")
        if self.end != "24:00" and _minutes(self.start) == _minutes(self.end):
            raise ValueError(f"start and end are both {self.start}: a window of no time (or of a whole day: "
                             "write 00:00 to 24:00)")
        return self

    def span(self) -> Span:
        """The window for the time arithmetic."""
        return Span(frozenset(DAYS.index(d) for d in self.days), _minutes(self.start), _minutes(self.end),
                    self.timezone)
