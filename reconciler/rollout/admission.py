"""Whether the upgrade machine may take one more node out now: the questions a site asks before a node goes.

The machine (upgrade.py) asks its `Admission` before it starts each node (a node already in flight always
finishes). The answer is a `Verdict`: go; wait (not this node now: ask again when a node finishes or a poll passes;
another node may go meanwhile, e.g. one of another partition); or hold (no node starts until the hold lifts: a
closed maintenance window, an operator's pause). The machine journals what it waits for, so `status`, the page
and the PR comment can say it. The policies are the callers' (windows, capacity, the operator's commands): this
module only says how their answers combine, and holds the one policy the machine had before, a count of its own
nodes out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Kind = Literal["go", "wait", "hold"]


@dataclass(frozen=True)
class Verdict:
    """One answer: go, wait (this node, not now) or hold (no node, until it lifts); WHY for status, UNTIL when
    the answer is known to change (a window's opening, as a Unix time), if it is."""

    kind: Kind
    why: str = ""
    until: float | None = None

    @property
    def go(self) -> bool:
        """The node may start now."""
        return self.kind == "go"


GO = Verdict("go")


class Admission(Protocol):
    """A policy asked before a node starts."""

    def admit(self, node: str, out: Sequence[str]) -> Verdict:
        """May NODE start now, with OUT (the machine's nodes in flight) out already?"""


@dataclass(frozen=True)
class OwnCount:
    """At most LIMIT of the machine's own nodes out at a time (max_unavailable as a plain count, nothing else
    counted: what the machine did before the site's policies)."""

    limit: int

    def admit(self, node: str, out: Sequence[str]) -> Verdict:
        """Wait while LIMIT nodes are out."""
        if len(out) < self.limit:
            return GO
        return Verdict("wait", f"{len(out)} node(s) out for the upgrade, max_unavailable {self.limit}")


@dataclass(frozen=True)
class Admissions:
    """Every policy in order: the first hold wins, else the first wait, else go."""

    policies: Sequence[Admission]

    def admit(self, node: str, out: Sequence[str]) -> Verdict:
        """The combined answer (every policy is asked until one holds)."""
        first_wait: Verdict | None = None
        for policy in self.policies:
            verdict = policy.admit(node, out)
            if verdict.kind == "hold":
                return verdict
            if verdict.kind == "wait" and first_wait is None:
                first_wait = verdict
        return first_wait or GO
