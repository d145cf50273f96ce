"""One test of nccl-tests text output as it is read, and the result model it becomes once complete."""

from __future__ import annotations

from dataclasses import dataclass, field

from reconciler.checks.nccl.binary import collective_from_binary
from reconciler.checks.nccl.models import NcclDevice, NcclRow, NcclTest
from reconciler.checks.nccl.table import Columns, layout_of


@dataclass
class PartialTest:
    """What has been read of the test being parsed."""

    binary: str | None = None
    tool: str | None = None
    nccl_version: int | None = None
    ngpus: int | None = None
    validation: bool | None = None
    seen_nthread: bool = False
    columns: Columns | None = None
    time_kind: str = "time"
    devices: list[NcclDevice] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    out_of_bounds: int | None = None
    bitwise: int | None = None
    avg_busbw: float | None = None
    avg_ok: bool | None = None
    concluded: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def has_footer(self) -> bool:
        """True once the out-of-bounds or average line was read."""
        return self.out_of_bounds is not None or self.avg_busbw is not None

    @property
    def used(self) -> bool:
        """True once anything beyond the version line belongs to this test."""
        return bool(self.binary or self.seen_nthread or self.columns or self.rows or self.has_footer)


def _closing_errors(state: PartialTest) -> list[str]:
    """Errors known only once a test is complete: a cut row, a missing footer, no rows at all.

    Wrong values, out-of-bounds counts and a failed -a check are results, not errors: the verdict
    (checks.nccl.verdict) judges them.
    """
    errors = list(state.errors)
    if state.pending:
        errors.append(f"truncated row: {' '.join(state.pending)}")
    if (state.columns or state.rows) and not state.has_footer:
        last = f" (last size {state.rows[-1].size})" if state.rows else ""
        errors.append(f"truncated output: no footer after {len(state.rows)} rows{last}")
    elif not state.rows and not state.errors:
        errors.append("no result rows")
    return errors


def finish_test(state: PartialTest, default_collective: str) -> NcclTest:
    """Turn a test state into the result model."""
    columns = state.columns.names if state.columns else []
    return NcclTest(
        collective=collective_from_binary(state.binary) if state.binary else default_collective,
        binary=state.binary,
        tool=state.tool,
        nccl_version=state.nccl_version,
        layout=layout_of(columns),
        time_kind="cputime" if state.time_kind == "cputime" else "time",
        ngpus=state.ngpus,
        validation=state.validation,
        devices=state.devices,
        columns=columns,
        rows=state.rows,
        out_of_bounds=state.out_of_bounds,
        bitwise_mismatches=state.bitwise,
        avg_busbw=state.avg_busbw,
        avg_busbw_ok=state.avg_ok,
        concluded=state.concluded,
        errors=_closing_errors(state),
    )
