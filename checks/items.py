"""One thing checked on a node (an `Item`) and the small helpers every judge shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reconciler.facts.sections import Section

ItemStatus = Literal["pass", "fail", "error"]


@dataclass(frozen=True)
class Item:
    """One thing checked on a node: pass, fail (the node's fault) or error (could not tell)."""

    name: str
    status: ItemStatus
    message: str

    @property
    def ok(self) -> bool:
        """True when the item passed."""
        return self.status == "pass"


def no_output(what: str, sec: Section | None) -> Item | None:
    """An error item when a probe's section is missing or cut off."""
    if sec is None or sec.rc is None:
        return Item(what, "error", f"{what}: no complete output from the probe")
    return None


def tail(sec: Section) -> str:
    """The last output line of a section, or ''."""
    return sec.lines[-1] if sec.lines else ""
