"""Desired-state schema of `checks.fleet`: how long every GPU's history is kept, and the rules that make a GPU an
RMA candidate.

The defaults follow NVIDIA's documents (docs/gpu-fleet.md cites each):
- a row-remapping failure is NVIDIA's own RMA criterion for GPU memory (GPU Memory Error Management, "RMA Policy");
- uncorrectable (double-bit) ECC errors on the GPU's lifetime counter;
- a retired page or a row remap still pending after the GPU was reset (a new boot): a reset applies them;
- XIDs the catalogue describes as the GPU itself failing: 79 (fallen off the bus) and 64 (a page or row could
  not be retired) at once, the memory and link ones (48, 74, 94, 95, 140) and GSP ones (119, 120) when repeated.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from reconciler.model.base import Strict
from reconciler.model.bounds import count, duration_between

DAY = 86_400
Retention = duration_between(DAY, 400 * DAY)
Within = duration_between(60, 400 * DAY)
Times = count(1, 1_000_000)
Errors = count(0, 1_000_000)


class XidRule(Strict):
    """XIDs of CODES seen COUNT times or more within WITHIN on one GPU."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Shown as the rule a candidate met")
    codes: list[int] = Field(min_length=1, description="XID codes, e.g. [79]")
    count: Times = 1  # type: ignore[valid-type]
    within: Within = "30d"  # type: ignore[valid-type]

    @field_validator("codes")
    @classmethod
    def _codes(cls, value: list[int]) -> list[int]:
        bad = [c for c in value if isinstance(c, bool) or not 1 <= c <= 1000]
        if bad:
            raise ValueError(f"an XID is a number from 1 to 1000, got {bad[0]!r}")
        if len(set(value)) != len(value):
            raise ValueError(f"an XID is listed twice in {value}")
        return value


def _default_xids() -> list[XidRule]:
    return [XidRule(name="xid-hardware", codes=[79, 64], count=1, within="30d"),
            XidRule(name="xid-repeated", codes=[48, 74, 94, 95, 119, 120, 140], count=3, within="7d")]


class RmaRules(Strict):
    """When a GPU becomes an RMA candidate (any rule met); each rule can be switched off."""

    row_remap_failure: bool = Field(default=True, description="The GPU reports a row-remapping failure")
    uncorrectable_ecc: Errors = Field(  # type: ignore[valid-type]
        default=1, description="Lifetime uncorrectable ECC errors at least this many (0: off)")
    pending_after_reset: bool = Field(default=True, description="A retired page or row remap still pending "
                                      "after the GPU was reset (seen pending in two boots)")
    xids: list[XidRule] = Field(default_factory=_default_xids)

    @field_validator("xids")
    @classmethod
    def _names(cls, value: list[XidRule]) -> list[XidRule]:
        names = [r.name for r in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"XID rule {twice[0]!r} is named twice")
        return value


class FleetRules(Strict):
    """Every GPU's history (by UUID) in the daemon's store: how long it is kept, when a GPU is an RMA candidate,
    when a node's NCCL bandwidth counts as sliding."""

    retention: Retention = "30d"  # type: ignore[valid-type]
    rma: RmaRules = Field(default_factory=RmaRules)
    bandwidth_drop: float = Field(default=10.0, gt=0, lt=100, description="Per cent: a node whose NCCL bus "
                                  "bandwidth fell this much (its last runs against its first in the history) is "
                                  "ranked with why")
