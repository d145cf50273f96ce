"""Maintenance-window arithmetic (reconciler/common/windows.py) and the rollout's admission and words for it
(reconciler/rollout/windows.py): midnight, several windows, daylight saving in a real zone (zoneinfo), and
properties over random windows and instants (Hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.common.windows import DAYS, Span, current, next_open
from reconciler.model.windows import Window
from reconciler.rollout.windows import WindowAdmission, closed, state_at

BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str, zone: ZoneInfo = BERLIN) -> datetime:
    """A wall-clock time in ZONE as an aware instant."""
    return datetime.fromisoformat(text).replace(tzinfo=zone)


def night(days: list[str], start: str = "22:00", end: str = "06:00", zone: str = "Europe/Berlin") -> Window:
    return Window(days=days, start=start, end=end, timezone=zone)


def test_a_window_crossing_midnight_belongs_to_the_day_it_starts() -> None:
    fri = [night(["fri"]).span()]  # 2026-11-27 is a Friday
    assert current(fri, at("2026-11-27 21:59")) is None
    assert current(fri, at("2026-11-27 22:00")) is not None
    inside = current(fri, at("2026-11-28 05:59"))
    assert inside is not None and inside[0] == at("2026-11-28 06:00")
    assert current(fri, at("2026-11-28 06:00")) is None
    assert current(fri, at("2026-11-26 23:00")) is None  # Thursday night: not one of its days
    opening = next_open(fri, at("2026-11-28 06:00"))
    assert opening is not None and opening[0] == at("2026-12-04 22:00")


def test_the_first_of_several_windows_to_open_is_next_and_24_00_ends_the_day() -> None:
    windows = [night(["mon-fri"]).span(), Window(days=["sat", "sun"], start="00:00", end="24:00",
                                                 timezone="UTC").span()]
    assert current(windows, at("2026-11-28 12:00", ZoneInfo("UTC"))) is not None  # Saturday, all day (UTC)
    opening = next_open(windows, at("2026-11-30 07:00"))  # Monday morning: Monday night is next
    assert opening is not None and opening[0] == at("2026-11-30 22:00")
    whole = Window(days=["sun"], start="00:00", end="24:00").span()
    assert current([whole], at("2026-11-29 23:59:59", ZoneInfo("UTC"))) is not None
    assert current([whole], at("2026-11-30 00:00", ZoneInfo("UTC"))) is None


def test_daylight_saving_keeps_the_wall_clock_times() -> None:
    spring = [Window(days=["sun"], start="01:00", end="04:00", timezone="Europe/Berlin").span()]
    opens, closes = spring[0].on(datetime(2026, 3, 29).date()) or (None, None)
    assert opens is not None and closes is not None and closes - opens == timedelta(hours=2)  # 02:00 -> 03:00
    autumn = spring[0].on(datetime(2026, 10, 25).date())
    assert autumn is not None and autumn[1] - autumn[0] == timedelta(hours=4)  # 03:00 -> 02:00 again
    assert autumn[1].astimezone(BERLIN).strftime("%H:%M %Z") == "04:00 CET"
    gap = Window(days=["sun"], start="02:30", end="05:00", timezone="Europe/Berlin").span()
    found = gap.on(datetime(2026, 3, 29).date())  # 02:30 does not exist that night: read as 03:30 CEST (fold 0)
    assert found is not None and found[0].astimezone(BERLIN).strftime("%H:%M %Z") == "03:30 CEST"


SPANS = st.builds(lambda days, start, length, zone: Span(frozenset(days), start, (start + length) % 1440 or 1440,
                                                         zone),
                  st.sets(st.integers(0, 6), min_size=1), st.integers(0, 1439), st.integers(1, 1439),
                  st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
                                   "Asia/Kolkata"]))
INSTANTS = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2028, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC))


@settings(max_examples=300, deadline=None)
@given(st.lists(SPANS, min_size=1, max_size=3), INSTANTS)
def test_the_next_opening_is_later_inside_a_window_and_nothing_between_is_inside(spans: list[Span],
                                                                                 now: datetime) -> None:
    opening = next_open(spans, now)
    assert opening is not None and opening[0] > now
    assert current(spans, opening[0]) is not None
    if current(spans, now) is None:  # outside: closed all the way to the opening
        step = (opening[0] - now) / 7
        assert all(current(spans, now + step * k) is None for k in range(1, 7))


@settings(max_examples=300, deadline=None)
@given(st.lists(SPANS, min_size=1, max_size=3), INSTANTS)
def test_inside_a_window_it_closes_later_and_is_inside_until_then(spans: list[Span], now: datetime) -> None:
    inside = current(spans, now)
    if inside is None:
        return
    closes = inside[0]
    assert closes > now
    step = (closes - now) / 5
    assert all(current(spans, now + step * k) is not None for k in range(5))


def test_the_admission_holds_until_the_next_opening_outside_and_lets_go_inside() -> None:
    windows = [night(["sat"])]
    outside = WindowAdmission(windows, now=lambda: at("2026-11-28 12:00"))
    verdict = outside.admit("gpu01", [])
    assert verdict.kind == "hold" and verdict.until == at("2026-11-28 22:00").timestamp()
    assert verdict.why == ("outside the maintenance windows (rollout.windows: sat 22:00-06:00 Europe/Berlin); "
                           "closed; next opens Sat 2026-11-28 22:00 CET")
    assert WindowAdmission(windows, now=lambda: at("2026-11-29 05:00")).admit("gpu01", ["gpu02"]).go
    assert WindowAdmission([], now=lambda: at("2026-11-28 12:00")).admit("gpu01", []).go  # no windows: always


def test_windows_hold_every_apply_only_when_they_say_all() -> None:
    windows = [night(["sat"])]
    noon = at("2026-11-28 12:00")
    assert closed(windows, "upgrades", noon) is None
    shut = closed(windows, "all", noon)
    assert shut is not None and shut.text() == "closed; next opens Sat 2026-11-28 22:00 CET"
    assert closed(windows, "all", at("2026-11-28 23:00")) is None
    state = state_at(windows, at("2026-11-28 23:00"))
    assert state is not None and state.text() == "open until Sun 2026-11-29 06:00 CET"
    assert DAYS[noon.weekday()] == "sat"


def test_status_shows_the_windows_open_or_closed_and_what_they_hold(tmp_path: Path) -> None:
    from reconciler.daemon.store import Store
    from reconciler.daemon.windows_view import WINDOWS_KEY, record, status_json, status_line
    from reconciler.model.rollout import Rollout

    store = Store(tmp_path / "state.db")
    try:
        record(store, Rollout.model_validate({"windows": [{"days": "sat", "start": "22:00", "end": "06:00",
                                                            "timezone": "Europe/Berlin"}]}))
        found = status_json(store.get(WINDOWS_KEY), at("2026-11-28 12:00").timestamp())
    finally:
        store.close()
    assert found is not None and found["open"] is False and found["opens"] == at("2026-11-28 22:00").timestamp()
    assert status_line(found) == ["windows:        closed; next opens Sat 2026-11-28 22:00 CET (sat 22:00-06:00 "
                                  "Europe/Berlin; outside them: no reboots and driver reloads)"]
    assert status_json({"windows": [{"start": "99:00"}]}, 0.0) is None  # unreadable: not shown, never raised
    assert status_json({"windows": []}, 0.0) is None
