"""Pass/fail verdict on parsed nccl-tests results: fixed thresholds and a regression check.

Reasons read like ``nccl all_reduce busbw 120.3 < 330 GB/s`` so that they can serve as a Slurm
drain reason once prefixed (``reconciler: ...``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from reconciler.checks.nccl.models import NcclRow, NcclRun, NcclTest

PlacementChoice = Literal["both", "oop", "ip"]
FindingKind = Literal["error", "missing", "busbw", "avg_busbw", "wrong", "out_of_bounds", "regression"]


class Thresholds(BaseModel):
    """Limits for the tests of one collective (or of every test when collective is None)."""

    collective: str | None = Field(default=None, description="e.g. all_reduce; None: every test")
    min_busbw: float | None = Field(default=None, description="GB/s, for every row at or above min_size")
    min_size: int = Field(default=0, ge=0, description="bytes; rows below it are not held to min_busbw")
    placement: PlacementChoice = Field(
        default="both", description="busbw of out-of-place, in-place, or the lower of both"
    )
    min_avg_busbw: float | None = Field(default=None, description="GB/s, against 'Avg bus bandwidth'")
    max_wrong: int = Field(default=0, ge=0, description="wrong elements allowed over all rows")
    max_out_of_bounds: int = Field(default=0, ge=0)


class RegressionPolicy(BaseModel):
    """When a node's bus bandwidth counts as fallen below its own recent median."""

    max_drop_pct: float = Field(default=10.0, gt=0, description="flag a drop of more than this percentage")
    window: int = Field(default=5, ge=1, description="compare with the median of the last K values")
    min_history: int = Field(default=3, ge=1, description="fewer past values than this: no judgement")


class Finding(BaseModel):
    """One reason for failing."""

    kind: FindingKind
    collective: str | None = None
    message: str
    size: int | None = None
    value: float | None = None
    limit: float | None = None


class Verdict(BaseModel):
    """Outcome of evaluate(): passed, and the reasons when not."""

    passed: bool
    findings: list[Finding] = Field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        """Human-readable reasons, one per finding."""
        return [f.message for f in self.findings]

    @property
    def reason(self) -> str | None:
        """All reasons in one line (e.g. for a drain reason); None when passed."""
        return "; ".join(self.reasons) or None


class RegressionResult(BaseModel):
    """Outcome of check_regression()."""

    regressed: bool
    current: float
    median: float | None = None
    drop_pct: float | None = None
    history_used: int = 0
    reason: str | None = None


def format_size(size: int) -> str:
    """Bytes as nccl-tests users write them: 8 B, 64 KiB, 1 GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):g} {unit}"
    return f"{size} B"


def row_busbw(row: NcclRow, placement: PlacementChoice = "both") -> float | None:
    """Bus bandwidth of a row for the chosen placement ('both': the lower of the two)."""
    return row.busbw(None if placement == "both" else placement)


def representative_busbw(
    test: NcclTest, min_size: int = 0, placement: PlacementChoice = "both"
) -> float | None:
    """Mean bus bandwidth of the rows at or above min_size: the figure to keep in a node's history."""
    values = [b for row in test.rows if row.size >= min_size and (b := row_busbw(row, placement)) is not None]
    return statistics.fmean(values) if values else None


def check_busbw(test: NcclTest, limits: Thresholds) -> list[Finding]:
    """The lowest busbw at or above min_size against min_busbw."""
    if limits.min_busbw is None:
        return []
    scored = [
        (b, row)
        for row in test.rows
        if row.size >= limits.min_size and (b := row_busbw(row, limits.placement)) is not None
    ]
    if not scored:
        message = f"nccl {test.collective}: no rows at or above {format_size(limits.min_size)}"
        return [Finding(kind="missing", collective=test.collective, message=message)]
    value, row = min(scored, key=lambda pair: pair[0])
    if value >= limits.min_busbw:
        return []
    message = f"nccl {test.collective} busbw {value:.1f} < {limits.min_busbw:g} GB/s"
    return [
        Finding(
            kind="busbw", collective=test.collective, message=message, size=row.size, value=value,
            limit=limits.min_busbw,
        )
    ]  # fmt: skip


def check_avg_busbw(test: NcclTest, limits: Thresholds) -> list[Finding]:
    """'Avg bus bandwidth' against min_avg_busbw."""
    if limits.min_avg_busbw is None:
        return []
    if test.avg_busbw is None:
        message = f"nccl {test.collective}: no average bus bandwidth"
        return [Finding(kind="missing", collective=test.collective, message=message)]
    if test.avg_busbw >= limits.min_avg_busbw:
        return []
    message = f"nccl {test.collective} avg busbw {test.avg_busbw:.1f} < {limits.min_avg_busbw:g} GB/s"
    return [
        Finding(
            kind="avg_busbw", collective=test.collective, message=message, value=test.avg_busbw,
            limit=limits.min_avg_busbw,
        )
    ]  # fmt: skip


def check_wrong(test: NcclTest, limits: Thresholds) -> list[Finding]:
    """Wrong elements (#wrong) and out-of-bounds values against their limits."""
    findings: list[Finding] = []
    wrong = test.total_wrong
    if wrong is not None and wrong > limits.max_wrong:
        first = next(row for row in test.rows if row.wrong)
        message = f"nccl {test.collective} {wrong} wrong elements (first at {format_size(first.size)})"
        findings.append(
            Finding(kind="wrong", collective=test.collective, message=message, size=first.size, value=wrong)
        )
    bounds = test.out_of_bounds
    if bounds is not None and bounds > limits.max_out_of_bounds:
        message = f"nccl {test.collective} {bounds} out-of-bounds values"
        findings.append(
            Finding(kind="out_of_bounds", collective=test.collective, message=message, value=bounds)
        )
    return findings


def check_regression(
    current: float,
    history: Sequence[float],
    policy: RegressionPolicy | None = None,
    label: str = "busbw",
) -> RegressionResult:
    """Flag current when it is more than max_drop_pct below the median of the last `window` values."""
    policy = policy or RegressionPolicy()
    recent = list(history)[-policy.window :]
    if len(recent) < policy.min_history:
        return RegressionResult(regressed=False, current=current, history_used=len(recent))
    median = statistics.median(recent)
    drop = (median - current) / median * 100.0 if median > 0 else 0.0
    regressed = drop > policy.max_drop_pct
    reason = (
        f"nccl {label} {current:.1f} GB/s is {drop:.1f}% below its median {median:.1f} GB/s "
        f"of the last {len(recent)} runs"
        if regressed
        else None
    )
    return RegressionResult(
        regressed=regressed,
        current=current,
        median=median,
        drop_pct=drop,
        history_used=len(recent),
        reason=reason,
    )


def _regression_findings(
    test: NcclTest, limits: Thresholds, history: Sequence[float], policy: RegressionPolicy | None
) -> list[Finding]:
    """A regression finding for one test, given the node's past representative busbw values."""
    current = representative_busbw(test, limits.min_size, limits.placement)
    if current is None:
        return []
    result = check_regression(current, history, policy, label=f"{test.collective} busbw")
    if not result.regressed or result.reason is None:
        return []
    return [
        Finding(
            kind="regression", collective=test.collective, message=result.reason, value=current,
            limit=result.median,
        )
    ]  # fmt: skip


def _error_findings(run: NcclRun) -> list[Finding]:
    """Parse and run errors (crash, truncation, exit code) as findings."""
    return [Finding(kind="error", message=f"nccl {error}") for error in run.all_errors()]


def _selected(run: NcclRun, limits: Thresholds) -> tuple[list[NcclTest], list[Finding]]:
    """Tests the thresholds apply to, and a finding when a named collective is absent."""
    tests = [t for t in run.tests if limits.collective in (None, t.collective)]
    if tests or limits.collective is None:
        return tests, []
    message = f"nccl {limits.collective}: no results"
    return [], [Finding(kind="missing", collective=limits.collective, message=message)]


def evaluate(
    run: NcclRun,
    thresholds: Thresholds | Sequence[Thresholds],
    history: Mapping[str, Sequence[float]] | None = None,
    policy: RegressionPolicy | None = None,
) -> Verdict:
    """Judge a parsed run: errors, thresholds and, given per-collective history, regressions."""
    findings = _error_findings(run)
    for limits in [thresholds] if isinstance(thresholds, Thresholds) else thresholds:
        tests, missing = _selected(run, limits)
        findings.extend(missing)
        for test in tests:
            findings += check_busbw(test, limits) + check_avg_busbw(test, limits) + check_wrong(test, limits)
            if history and test.collective in history:
                findings += _regression_findings(test, limits, history[test.collective], policy)
    return Verdict(passed=not findings, findings=findings)
