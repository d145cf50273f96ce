"""Maintenance windows as time arithmetic: is an instant inside one, when does the next open, when does it close.

A window is days of the week, a start and an end wall-clock time, and a time zone (kured's reboot days, start
and end time and time zone; Argo CD's sync windows). A window whose end is not after its start crosses midnight
and belongs to the day it starts (`fri 22:00-06:00` runs from Friday 22:00 to Saturday 06:00); `24:00` is the
end of its day. Times are wall-clock times in the window's zone, turned into instants with zoneinfo, so a window
keeps its local times across daylight-saving changes (it is an hour shorter or longer on those nights). A wall
time the zone skips (spring forward) is read with the offset before the change, as PEP 495's fold 0 does (a 02:30
start on that night in Europe/Berlin opens at 03:30 CEST), and a time that occurs twice (autumn) is its first
occurrence. The schema is reconciler/model/windows.py; one notion for the rollout's
windows and anything else that waits for one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAY_MINUTES = 24 * 60


@dataclass(frozen=True)
class Span:
    """One window: weekdays (0 = Monday), start and end in minutes after midnight (end 1440 = 24:00), a zone."""

    days: frozenset[int]
    start: int
    end: int
    zone: str

    @property
    def length(self) -> int:
        """Minutes from start to end on the wall clock (crossing midnight when end <= start)."""
        return self.end - self.start if self.end > self.start else self.end + DAY_MINUTES - self.start

    def text(self) -> str:
        """`mon,fri 22:00-06:00 Europe/Berlin`."""
        days = ",".join(DAYS[d] for d in sorted(self.days))
        return f"{days} {_hhmm(self.start)}-{_hhmm(self.end)} {self.zone}"

    def on(self, day: date) -> tuple[datetime, datetime] | None:
        """The window's instants (UTC) when it starts on DAY (a date in its zone), or None: not one of its days."""
        if day.weekday() not in self.days:
            return None
        zone = ZoneInfo(self.zone)
        opens = _instant(day, self.start, zone)
        closes_day = day + timedelta(days=1) if self.end <= self.start or self.end == DAY_MINUTES else day
        closes = _instant(closes_day, self.end % DAY_MINUTES, zone)
        return opens, closes


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _instant(day: date, minutes: int, zone: ZoneInfo) -> datetime:
    """DAY at MINUTES past midnight on ZONE's wall clock, as a UTC instant (fold 0: see the module's note)."""
    return datetime.combine(day, time(minutes // 60, minutes % 60), tzinfo=zone).astimezone(UTC)


def _around(spans: Iterable[Span], now: datetime, days: range) -> list[tuple[datetime, datetime, Span]]:
    """Every window occurrence that starts on one of DAYS (offsets from NOW's date in each span's zone)."""
    out = []
    for span in spans:
        today = now.astimezone(ZoneInfo(span.zone)).date()
        for offset in days:
            found = span.on(today + timedelta(days=offset))
            if found is not None:
                out.append((found[0], found[1], span))
    return sorted(out, key=lambda item: (item[0], item[1]))


def current(spans: Sequence[Span], now: datetime) -> tuple[datetime, Span] | None:
    """The window NOW is in, as (when the windows NOW is in close, the one closing last), or None: outside."""
    inside = [(closes, span) for opens, closes, span in _around(spans, now, range(-2, 1)) if opens <= now < closes]
    return max(inside, key=lambda item: item[0]) if inside else None


def next_open(spans: Sequence[Span], now: datetime) -> tuple[datetime, Span] | None:
    """The first window opening after NOW, as (its opening, the window); None without windows."""
    later = [(opens, span) for opens, _, span in _around(spans, now, range(-1, 9)) if opens > now]
    return min(later, key=lambda item: item[0]) if later else None


def local_text(instant: datetime, zone: str) -> str:
    """An instant as its window's zone shows it: `Sat 2026-11-28 22:00 CET`."""
    return instant.astimezone(ZoneInfo(zone)).strftime("%a %Y-%m-%d %H:%M %Z")
