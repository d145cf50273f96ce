"""The maintenance windows of the applied (or pending) commit as `reconciler status` and the status page show
them: open until when, or closed and when the next opens, and what they hold.

The daemon keeps the windows of the commit it reconciles in its state database (`record`, each cycle); status
reads them back and asks the time arithmetic (reconciler/rollout/windows.py) about now. What the upgrade's nodes
wait for meanwhile is the journal's (upgrade_view.waiting).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from reconciler.model.rollout import Rollout
from reconciler.model.windows import Window
from reconciler.rollout.windows import describe, holds, state_at

WINDOWS_KEY = "maintenance_windows"  # {"windows": [Window as JSON], "applies_to": "upgrades" | "all"}


def record(store: Any, rollout: Rollout) -> None:
    """Keep ROLLOUT's windows for status (written only when they changed)."""
    value = {"windows": [w.model_dump(mode="json") for w in rollout.windows], "applies_to": rollout.windows_apply_to}
    if store.get(WINDOWS_KEY) != value:
        store.set(WINDOWS_KEY, value)


def status_json(value: Any, now: float) -> dict[str, Any] | None:
    """`status`'s "windows" key: the windows, what they hold, open or closed now and until or from when; None
    without windows (or a record this release cannot read)."""
    if not isinstance(value, dict) or not value.get("windows"):
        return None
    try:
        windows = [Window.model_validate(w) for w in value["windows"]]
    except (ValidationError, TypeError):
        return None
    state = state_at(windows, datetime.fromtimestamp(now, UTC))
    if state is None:
        return None
    return {"windows": describe(windows), "holds": holds(str(value.get("applies_to"))), "open": state.inside,
            "closes": state.closes.timestamp() if state.closes else None,
            "opens": state.opens.timestamp() if state.opens else None, "text": state.text()}


def status_line(found: dict[str, Any] | None) -> list[str]:
    """`windows:        closed; next opens Sat 2026-11-28 22:00 CET (mon-fri 22:00-06:00 ...; hold reboots ...)`."""
    if not found:
        return []
    return [f"windows:        {found['text']} ({found['windows']}; outside them: no {found['holds']})"]
