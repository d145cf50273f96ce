"""The daemon's side of progressive rollouts: the journal in SQLite, records, and what a rollout means for runs."""

from __future__ import annotations

from typing import Any

from reconciler.daemon.store import JOURNAL_KEY, Store, journal_where
from reconciler.rollout.journal import RolloutJournal, decode, encode
from reconciler.rollout.rollback_text import restore_headline
from reconciler.rollout.runner import RolloutResult

# How a rollout's status reads as a run outcome (runs table, metrics, history).
OUTCOMES = {"complete": "applied", "rolled-back": "rolled-back", "rollback-failed": "failed", "failed": "failed",
            "stopped": "stopped"}


class StoreJournal:
    """The rollout in flight, kept in the state database (written before every step)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def save(self, journal: RolloutJournal) -> None:
        """Replace the record of the rollout in flight."""
        self.store.set(JOURNAL_KEY, encode(journal))

    def load(self) -> RolloutJournal | None:
        """The rollout in flight, if a process left one (JournalRefused: one this reconciler cannot read)."""
        value = self.store.get(JOURNAL_KEY)
        return None if value is None else decode(value, journal_where(self.store.path))

    def clear(self) -> None:
        """The rollout ended (complete or rolled back)."""
        self.store.set(JOURNAL_KEY, None)


def outcome_of(result: RolloutResult) -> tuple[str, str | None]:
    """The run outcome and error text of a rollout."""
    outcome = OUTCOMES[result.status]
    if result.status == "complete":
        return outcome, None
    error = result.reason
    if result.rollback and result.rollback.get("errors"):
        error += "; rollback failed: " + "; ".join(result.rollback["errors"])[:500]
    elif result.rollback and result.rollback.get("error"):
        error += "; " + str(result.rollback["error"])
    return outcome, error


def rolled_back_record(result: RolloutResult) -> dict[str, Any]:
    """What `status` shows of a rolled-back commit (gate, nodes, reason, the drains resumed)."""
    gate = result.failed_gate or {}
    return {"wave": result.failed_wave, "gate": gate.get("gate"), "nodes": gate.get("nodeset") or "",
            "message": gate.get("message"), "drained": gate.get("drained") or {}, "failed": gate.get("failed") or [],
            "reverted": (result.rollback or {}).get("nodes"), "resumed": (result.rollback or {}).get("resumed", []),
            "to": result.previous, "status": result.status, "errors": (result.rollback or {}).get("errors") or [],
            **_restore_summary(result.rollback or {})}


def _restore_summary(rollback: dict[str, Any]) -> dict[str, Any]:
    """For a before-image restore (no earlier commit): its headline and the nodes with resources not restored."""
    if not rollback.get("before_image"):
        return {}
    return {"before_image": True, "headline": restore_headline(rollback),
            "not_restored": sorted(rollback.get("not_restored") or {})}
