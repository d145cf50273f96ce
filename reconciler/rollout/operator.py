"""The operator's hand on the upgrade: pause / resume, skip NODE, retry NODE (issue 46 item 4).

The commands are requests kept where the daemon keeps its state (daemon/operator.py: the state database), so a
command given beside a running daemon reaches it without stopping it, and a request not yet acted on survives a
restart. The machine (upgrade.py) reads them through a `Desk` on each pass of its scheduler: a pause is a `hold`
verdict of `PauseAdmission` (nodes in flight finish, no new node starts); a skip takes a node not yet started out
of the upgrade (final state `skipped`: left on the old version); a retry puts a failed node back to
`upgrade-required`, out of the failure count (its drain is the machine's own, the `reconciler: upgrade` reason, so
the machine resumes it after the gates). Each act is journalled in the upgrade's `operator` list (journal version 2)
and the desk's history.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from reconciler.rollout.admission import GO, Verdict
from reconciler.rollout.journal import UpgradeRecord
from reconciler.rollout.journal import UpgradeState as S

OPS = ("pause", "resume", "skip", "retry")


@dataclass(frozen=True)
class Request:
    """One operator command not yet acted on: who gave it, why, when (a Unix time)."""

    op: str
    node: str | None = None
    who: str = ""
    reason: str = ""
    at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """As stored."""
        return {"op": self.op, "node": self.node, "who": self.who, "reason": self.reason, "at": self.at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Request:
        """From its stored form."""
        return cls(str(data.get("op", "")), data.get("node"), str(data.get("who") or ""),
                   str(data.get("reason") or ""), float(data.get("at") or 0.0))

    def by(self) -> str:
        """`who: reason` as status says it."""
        return f"{self.who or 'unknown'}" + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class Requests:
    """The operator's standing requests: a pause (until a resume), skips and retries not yet acted on."""

    pause: Request | None = None
    skip: dict[str, Request] = field(default_factory=dict)
    retry: dict[str, Request] = field(default_factory=dict)


def pause_why(pause: Request) -> str:
    """The hold's why, as status shows it."""
    return f"paused by the operator ({pause.by()}) at {time.strftime('%H:%M UTC', time.gmtime(pause.at))}"


class Desk(Protocol):
    """Where the operator's requests are kept (the daemon's state database)."""

    def requests(self) -> Requests:
        """The requests standing now."""

    def acted(self, op: str, node: str, effect: str) -> None:
        """The machine acted on OP for NODE (EFFECT says how): the request is done, kept in the history."""


class NoDesk:
    """No operator (`reconciler apply` from a terminal: the person at it is the operator)."""

    def requests(self) -> Requests:
        """Nothing stands."""
        return Requests()

    def acted(self, op: str, node: str, effect: str) -> None:
        """Nothing to record."""


@dataclass(frozen=True)
class PauseAdmission:
    """Holds every node not started while the operator's pause stands."""

    desk: Desk

    def admit(self, node: str, out: Sequence[str]) -> Verdict:
        """Hold while paused, else go."""
        pause = self.desk.requests().pause
        return GO if pause is None else Verdict("hold", pause_why(pause))


def retried(upgrade: UpgradeRecord) -> list[str]:
    """Nodes the operator's retry put back to upgrade-required and not started since: the machine takes them
    again although the caller's plan no longer holds a change for them (their package went in before they failed)."""
    acts = {a.node for a in upgrade.operator if a.op == "retry" and a.node and a.effect.startswith("retried")}
    return sorted(n for n in acts if n in upgrade.nodes and upgrade.nodes[n].state == S.REQUIRED)
