"""How an upgrade of a set of nodes ended, and the failure of one node's step (reconciler/rollout/upgrade.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class UpgradeOutcome:
    """How the upgrade of a set of nodes ended."""

    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    over_budget: bool = False
    stopped: bool = False
    rolled_back: list[str] = field(default_factory=list)
    rollback_errors: dict[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """One line for a gate record."""
        head = "; ".join(f"{n}: {w}" for n, w in sorted(self.failed.items()))
        if self.over_budget:
            stuck = "; ".join(f"{n}: {w}" for n, w in sorted(self.rollback_errors.items()))
            return (f"{len(self.failed)} node(s) failed the upgrade, past the failure budget: {head}"
                    + (f"; rolled back {', '.join(self.rolled_back)}" if self.rolled_back else "")
                    + (f"; rollback FAILED on {stuck}" if stuck else ""))[:1000]
        return head[:500]


class NodeFailed(Exception):
    """A node's upgrade failed: the message says why."""
