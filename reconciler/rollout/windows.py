"""The rollout's maintenance windows (`rollout.windows`): the upgrade machine's admission outside them, and the
words `plan`, `status` and the PR comment use for them.

Outside every window no node starts a reboot or a driver reload (`Verdict("hold")` until the next opening); a
node already in one finishes it; the machine waits, its journal saying for what, and goes on when a window opens
(admission.py, upgrade.py). With `windows_apply_to: all` no commit is applied outside them either: the daemon
and `reconciler apply` ask `closed()` before they start. Time is the daemon's wall clock (common/clock.py), the
arithmetic common/windows.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.common import clock
from reconciler.common.windows import Span, current, local_text, next_open
from reconciler.model.windows import Window
from reconciler.rollout.admission import GO, Verdict


def spans(windows: Sequence[Window]) -> list[Span]:
    """The windows for the arithmetic."""
    return [w.span() for w in windows]


@dataclass(frozen=True)
class WindowState:
    """Where NOW stands: inside (until when) or outside (and when the next window opens)."""

    inside: bool
    closes: datetime | None = None
    opens: datetime | None = None
    zone: str = "UTC"

    def text(self) -> str:
        """`open until Sat 2026-11-28 06:00 CET` / `closed; next opens Sat 2026-11-28 22:00 CET`."""
        if self.inside:
            return f"open until {local_text(self.closes, self.zone)}" if self.closes is not None else "open"
        return f"closed; next opens {local_text(self.opens, self.zone)}" if self.opens is not None else "closed"


def state_at(windows: Sequence[Window], now: datetime) -> WindowState | None:
    """Where NOW stands against WINDOWS; None without windows (always open)."""
    found = spans(windows)
    if not found:
        return None
    inside = current(found, now)
    if inside is not None:
        return WindowState(True, closes=inside[0], zone=inside[1].zone)
    opening = next_open(found, now)
    return WindowState(False, opens=opening[0] if opening else None, zone=opening[1].zone if opening else "UTC")


def holds(applies_to: str) -> str:
    """What the windows hold outside them, in words: `every apply` (all) or `reboots and driver reloads`."""
    return "every apply" if applies_to == "all" else "reboots and driver reloads"


def describe(windows: Sequence[Window]) -> str:
    """Every window in one line: `mon,tue 22:00-06:00 Europe/Berlin; sat,sun 00:00-24:00 UTC`."""
    return "; ".join(w.span().text() for w in windows)


@dataclass
class WindowAdmission:
    """Holds every node not yet started while outside the windows (an admission of upgrade.py's machine)."""

    windows: Sequence[Window]
    now: Callable[[], datetime] = field(default=clock.utcnow)

    def admit(self, node: str, out: Sequence[str]) -> Verdict:
        """Go inside a window; hold until the next opening outside."""
        state = state_at(self.windows, self.now())
        if state is None or state.inside:
            return GO
        return Verdict("hold", f"outside the maintenance windows (rollout.windows: {describe(self.windows)}); "
                               + state.text(),
                       until=state.opens.timestamp() if state.opens else None)


def closed(windows: Sequence[Window], applies_to: str, now: datetime | None = None) -> WindowState | None:
    """With `windows_apply_to: all`, the state of the windows when NOW is outside them (nothing may be applied);
    None when a commit may be applied now."""
    if applies_to != "all":
        return None
    state = state_at(windows, now if now is not None else clock.utcnow())
    return state if state is not None and not state.inside else None
