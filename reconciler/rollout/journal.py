"""The rollout journal: its types, its version, and the one place it is read from and written to.

The runner (runner.py) journals the rollout in flight before every step, and the upgrade machine (upgrade.py) each
node's state under `upgrade`, so a killed process can finish or roll back what it was doing (the daemon keeps it in
its SQLite store, and beside the HA lease; `reconciler apply` in memory). Everything else reads it through here:
`decode` for the code that acts on it (strict: a journal this reconciler cannot read is refused, naming where it is
and what to do, and nothing is changed), `glance` for what only shows it (status, page, metrics: never raises).

Versions: 1 is the format written before the journal had a `version` key (so a journal without one is version 1).
2 (issue 46) adds what the upgrade's nodes wait for (`upgrade.waiting`: a window, capacity, a pause) and the
operator's part; a version-1 journal is a version-2 journal without them, so it is read as it is. A format change
gets a new number and a reader of the old one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reconciler.engine.before_image import BeforeImage
from reconciler.engine.followups import FollowUp
from reconciler.rollout.waves import Wave, WavePlan

VERSION = 2  # the journal format this reconciler writes, and the newest it reads


class UpgradeState(StrEnum):
    """A node's state in the upgrade machine, in the order a node goes through them."""

    REQUIRED = "upgrade-required"
    DRAINING = "draining"
    WAITING_FOR_JOBS = "waiting-for-jobs"
    APPLYING = "applying"
    REBOOTING = "rebooting"
    RELOADING = "reloading"
    VALIDATING = "validating"
    DONE = "done"
    FAILED = "failed"
    ROLLING_BACK = "rolling-back"
    ROLLED_BACK = "rolled-back"
    ROLLBACK_FAILED = "rollback-failed"
    SKIPPED = "skipped"  # the operator's `reconciler upgrade skip`: left on the old version (version 2)


S = UpgradeState
STATES = tuple(s.value for s in UpgradeState)
FINAL = frozenset({S.DONE, S.FAILED, S.ROLLED_BACK, S.ROLLBACK_FAILED, S.SKIPPED})
_FORWARD = frozenset({S.REQUIRED, S.DRAINING, S.WAITING_FOR_JOBS, S.APPLYING, S.REBOOTING, S.RELOADING,
                      S.VALIDATING})
# Where each state may go (upgrade.py's steps). Any forward state may fail. Any state but the rollback's own ends
# may start a rollback: the machine rolls back only nodes it applied something on (from applying on), but a node's
# state is not what decides that, its journalled undo is.
TRANSITIONS: dict[UpgradeState, frozenset[UpgradeState]] = {
    S.REQUIRED: frozenset({S.DRAINING, S.SKIPPED}),  # skipped: the operator's, before the node started
    S.DRAINING: frozenset({S.WAITING_FOR_JOBS, S.REQUIRED}),  # back to required: an admin's drain, not upgraded
    S.WAITING_FOR_JOBS: frozenset({S.APPLYING, S.REQUIRED}),  # required: an admin drained it at its reservation
    S.APPLYING: frozenset({S.REBOOTING, S.RELOADING, S.VALIDATING}),  # validating: nothing was left to apply
    S.REBOOTING: frozenset({S.VALIDATING}),
    S.RELOADING: frozenset({S.VALIDATING}),
    S.VALIDATING: frozenset({S.DONE}),
    S.DONE: frozenset(),
    S.FAILED: frozenset({S.REQUIRED}),  # the operator's retry: through the machine again
    S.ROLLING_BACK: frozenset({S.ROLLED_BACK, S.ROLLBACK_FAILED}),
    S.ROLLED_BACK: frozenset(),
    S.ROLLBACK_FAILED: frozenset(),
    S.SKIPPED: frozenset(),
}
for _state in UpgradeState:
    TRANSITIONS[_state] |= ({S.FAILED} if _state in _FORWARD else frozenset())
    TRANSITIONS[_state] |= frozenset() if _state in (S.ROLLED_BACK, S.ROLLBACK_FAILED, S.SKIPPED) \
        else {S.ROLLING_BACK}


class IllegalTransition(ValueError):
    """A node asked to go to a state its current one does not lead to (a bug in the machine, never a node's)."""


class JournalRefused(Exception):
    """A journal this reconciler cannot read: the message names where it is and what to do."""


def check_transition(node: str, old: UpgradeState, new: UpgradeState) -> None:
    """Refuse OLD -> NEW unless the table allows it (staying in a state is no transition: journalled again)."""
    if new != old and new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "none: it is final"
        raise IllegalTransition(f"upgrade: {node}: {old.value} -> {new.value} is not a transition of the upgrade "
                                f"machine (from {old.value}: {allowed})")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class NodeEntry(_Model):
    """One node's upgrade state as journalled."""

    state: UpgradeState = S.REQUIRED
    since: float | None = None
    reason: str | None = None
    boot_id: str | None = None
    jobs: int = 0  # its running jobs while it drains (-1: could not be counted)
    # reservation mode (rollout/reservation.py): the node's maintenance reservation while it exists, its start
    # (the controller's local time, as Slurm prints it) and when it was made; the jobs `requeue` requeued
    reservation: str | None = None
    reservation_start: str | None = None
    reserved_at: float | None = None
    requeued: list[str] = Field(default_factory=list)

    def move(self, node: str, state: UpgradeState, **fields: Any) -> None:
        """Go to STATE (refused unless the table allows it), now, with FIELDS (reason, boot_id)."""
        check_transition(node, self.state, state)
        self.state, self.since = state, time.time()
        for name, value in fields.items():
            setattr(self, name, value)


class NodeWork(_Model):
    """What the upgrade applied on a node and how to undo it (the undo journalled before the apply)."""

    needs: str | None = None  # reboot | driver-reload
    undo: list[str] | None = None
    summary: str = ""
    failed: bool = False  # the node failed after its apply: rolled back, it stays drained


class Waiting(_Model):
    """What the upgrade's nodes not started wait for: `hold` (none starts: a closed window, a pause) or `wait`
    (capacity), why, and when it is known to lift (a Unix time), if it is."""

    kind: str
    why: str
    until: float | None = None
    nodes: list[str] = Field(default_factory=list)


class OperatorAct(_Model):
    """An operator's command as the machine acted on it (version 2): pause, resume, skip or retry, by whom, why,
    when it was given and when and how the machine acted on it."""

    op: str
    node: str | None = None
    who: str = ""
    reason: str = ""
    at: float | None = None  # given
    done: float | None = None  # acted on
    effect: str = ""


class UpgradeRecord(_Model):
    """The upgrade machine's part of the journal."""

    nodes: dict[str, NodeEntry] = Field(default_factory=dict)
    failed: list[str] = Field(default_factory=list)
    work: dict[str, NodeWork] = Field(default_factory=dict)
    max_unavailable: int | str | None = None
    waiting: Waiting | None = None  # version 2
    operator: list[OperatorAct] = Field(default_factory=list)  # version 2: the operator's commands acted on

    def summary(self) -> dict[str, Any]:
        """The node states, failed and the limit, for the rollout's record (the undo commands stay out)."""
        return self.model_dump(mode="json", exclude={"work"})


class SeenNode(_Model):
    """A node's Slurm state and reason as seen before the rollout."""

    state: str
    reason: str | None = None


class SeenBefore(_Model):
    """What was drained before the rollout (a view of Slurm's nodes, or why it could not be read)."""

    error: str | None = None
    nodes: dict[str, SeenNode] = Field(default_factory=dict)


class Phase(StrEnum):
    """Where the rollout in flight is."""

    STARTING = "starting"
    APPLYING = "applying"
    GATING = "gating"
    SOAKING = "soaking"
    ROLLING_BACK = "rolling-back"


class RolloutJournal(_Model):
    """The rollout in flight."""

    version: int = VERSION
    commit: str | None = None
    previous: str | None = None
    waves: dict[str, Any] = Field(default_factory=dict)  # WavePlan.as_dict() (waves.py owns its form)
    wave: int = 0  # the index of the wave under way
    phase: Phase = Phase.STARTING
    timeline: list[dict[str, Any]] = Field(default_factory=list)  # the waves done (RolloutResult.timeline)
    started: float | None = None
    before: SeenBefore = Field(default_factory=SeenBefore)
    pending_followups: list[FollowUp] | None = None  # of an apply under way: run again after a crash
    before_image: BeforeImage | None = None  # without a previous commit: what a rollback restores
    failed_wave: int | None = None
    failed_gate: dict[str, Any] | None = None  # GateResult.as_dict()
    restoring: bool = False  # a restore to the before-images has started
    upgrade: UpgradeRecord | None = None

    def wave_plan(self) -> WavePlan:
        """The rollout's waves."""
        data = self.waves
        return WavePlan([Wave.from_dict(w) for w in data.get("waves", [])], list(data.get("gates", [])),
                        int(data.get("soak_seconds", 0)), str(data.get("mode", "progressive")))

    def upgrading(self) -> UpgradeRecord:
        """The upgrade part, made on first use."""
        if self.upgrade is None:
            self.upgrade = UpgradeRecord()
        return self.upgrade

    def mid_upgrade(self) -> set[str]:
        """Nodes the upgrade has started and not ended (past upgrade-required, not in a final state)."""
        nodes = self.upgrade.nodes if self.upgrade else {}
        return {n for n, e in nodes.items() if e.state not in FINAL and e.state != S.REQUIRED}

    def final_upgrade(self) -> dict[str, Any] | None:
        """The upgrade part as the rollout ends, for its record (None without nodes)."""
        return self.upgrade.summary() if self.upgrade and self.upgrade.nodes else None

    def left_drained(self) -> dict[str, str]:
        """Nodes whose upgrade or its rollback failed, kept drained for a human, with why."""
        if self.upgrade is None:
            return {}
        nodes = self.upgrade.nodes
        out = {n: str((nodes[n].reason if n in nodes else None) or "upgrade failed") for n in self.upgrade.failed}
        out.update({n: e.reason or "rollback failed" for n, e in nodes.items() if e.state == S.ROLLBACK_FAILED})
        return out


# Keys written only when they say something (as before the journal had a version: a v1 journal written back is
# the same but for `version`).
_ONLY_WHEN_SET = ("pending_followups", "before_image", "failed_wave", "failed_gate", "restoring", "upgrade")


def encode(journal: RolloutJournal) -> dict[str, Any]:
    """The journal as JSON data, to store."""
    data = journal.model_dump(mode="json")
    data["version"] = VERSION  # an older journal read and written back is written in this format
    for key in _ONLY_WHEN_SET:
        if data[key] is None or data[key] is False:
            del data[key]
    if data.get("upgrade") and data["upgrade"].get("waiting") is None:
        del data["upgrade"]["waiting"]
    if data.get("upgrade") and not data["upgrade"].get("operator"):
        del data["upgrade"]["operator"]
    for entry in (data.get("upgrade") or {}).get("nodes", {}).values():  # reservation mode's: only when used
        for key in ("reservation", "reservation_start", "reserved_at"):
            if entry.get(key) is None:
                entry.pop(key, None)
        if not entry.get("requeued", True):
            del entry["requeued"]
    for work in (data.get("upgrade") or {}).get("work", {}).values():
        if not work["failed"]:
            del work["failed"]
    return data


def decode(data: Any, where: str) -> RolloutJournal:
    """A stored journal (found at WHERE), read; JournalRefused, saying what to do, when it is newer than this
    reconciler or does not parse. Nothing is changed either way."""
    if not isinstance(data, dict):
        raise JournalRefused(f"{where}: the rollout journal is not a record ({type(data).__name__}); "
                             + _WHAT_TO_DO)
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise JournalRefused(f"{where}: the rollout journal has no valid version ({version!r}); " + _WHAT_TO_DO)
    if version > VERSION:
        raise JournalRefused(
            f"{where}: the rollout journal is version {version}, written by a newer reconciler (this one reads up "
            f"to version {VERSION}): finish the rollout with the release that wrote it, or {_CLEAR}")
    try:
        return RolloutJournal.model_validate({**data, "version": version})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
                             for e in exc.errors()[:5])
        raise JournalRefused(f"{where}: the rollout journal does not parse ({problems}); " + _WHAT_TO_DO) from None


def refusal(data: Any, where: str) -> str | None:
    """Why the stored journal DATA (at WHERE) is refused, for status; None when it reads or there is none."""
    try:
        if data is not None:
            decode(data, where)
    except JournalRefused as exc:
        return str(exc)
    return None


_CLEAR = ("look at the nodes it names (drains, reboots under way) and remove it by hand (for the daemon: the "
          "`rollout_journal` row of the state database's `meta` table) before starting again")
_WHAT_TO_DO = "nothing was resumed or changed: " + _CLEAR


class Journal(Protocol):
    """Where the rollout in flight is kept (the daemon's SQLite store; memory for `reconciler apply`)."""

    def save(self, journal: RolloutJournal) -> None:
        """Replace the record of the rollout in flight."""

    def load(self) -> RolloutJournal | None:
        """The rollout in flight, if any (JournalRefused: one that cannot be read)."""

    def clear(self) -> None:
        """Forget the rollout in flight (it finished)."""


class MemoryJournal:
    """A journal that lives as long as the process (the CLI's), kept encoded as a store would keep it."""

    def __init__(self) -> None:
        self.data: dict[str, Any] | None = None

    def save(self, journal: RolloutJournal) -> None:
        """Keep an encoded copy."""
        self.data = encode(journal)

    def load(self) -> RolloutJournal | None:
        """The copy, read back."""
        return None if self.data is None else decode(self.data, "the rollout journal in memory")

    def clear(self) -> None:
        """Drop it."""
        self.data = None


@dataclass(frozen=True)
class Glance:
    """What a display shows of a stored journal, read leniently (a garbled field reads as absent)."""

    commit: str | None
    phase: str | None
    wave: int  # index of the wave under way
    nodesets: list[str | None]  # each wave's nodes
    upgrade: dict[str, Any] | None  # the upgrade part as stored, for upgrade_view (which shows garbles as such)


def glance(data: Any) -> Glance | None:
    """A stored journal for status, the page and metrics (None: no rollout in flight); never raises."""
    if not isinstance(data, dict):
        return None
    waves = data.get("waves")
    waves = waves.get("waves") if isinstance(waves, dict) else None
    nodesets = [str(w["nodeset"]) if isinstance(w, dict) and w.get("nodeset") is not None else None
                for w in waves or []]
    try:
        wave = int(data.get("wave") or 0)
    except (TypeError, ValueError):
        wave = 0
    upgrade = data.get("upgrade")
    commit, phase = data.get("commit"), data.get("phase")
    return Glance(None if commit is None else str(commit), None if phase is None else str(phase), wave, nodesets,
                  upgrade if isinstance(upgrade, dict) else None)
