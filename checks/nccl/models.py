"""Pydantic models for what the nccl-tests parser reads."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Placement = Literal["oop", "ip"]
Layout = Literal["pre-2.13", "2.13+", "json", "unknown"]


class NcclRow(BaseModel):
    """One line of the results table: one message size, out-of-place and in-place."""

    model_config = ConfigDict(frozen=True)

    size: int = Field(description="message size in bytes")
    count: int = Field(description="number of elements")
    type: str
    redop: str | None = Field(default=None, description="reduction op; None where the layout has no column")
    root: int | None = Field(default=None, description="root rank; None where the layout has no column")
    oop_time_us: float | None = None
    oop_algbw: float | None = None
    oop_busbw: float | None = None
    oop_wrong: int | None = Field(default=None, description="#wrong; None when N/A or in the pre-2.13 layout")
    oop_error: float | None = Field(default=None, description="pre-2.13 'error' column (max deviation)")
    ip_time_us: float | None = None
    ip_algbw: float | None = None
    ip_busbw: float | None = None
    ip_wrong: int | None = None
    ip_error: float | None = None
    timestamp: str | None = Field(default=None, description="row timestamp printed with -S 1")
    extra: dict[str, float] = Field(
        default_factory=dict, description="optional columns, e.g. oop_i_min (-I 1) or ip_#bitdiff"
    )

    @property
    def wrong(self) -> int | None:
        """Wrong elements of both placements together; None when neither was checked."""
        values = [w for w in (self.oop_wrong, self.ip_wrong) if w is not None]
        return sum(values) if values else None

    def busbw(self, placement: Placement | None = None) -> float | None:
        """Bus bandwidth of one placement, or the lower of both when placement is None."""
        if placement == "oop":
            return self.oop_busbw
        if placement == "ip":
            return self.ip_busbw
        values = [b for b in (self.oop_busbw, self.ip_busbw) if b is not None]
        return min(values) if values else None

    def busbw_max(self) -> float | None:
        """Higher bus bandwidth of the two placements."""
        return max((b for b in (self.oop_busbw, self.ip_busbw) if b is not None), default=None)


class NcclDevice(BaseModel):
    """One '#  Rank ...' line of the device report."""

    model_config = ConfigDict(frozen=True)

    rank: int
    group: int | None = None
    pid: int | None = None
    host: str
    device: str
    bus_id: str | None = None
    name: str | None = None


class NcclTest(BaseModel):
    """One test (one binary run, e.g. all_reduce_perf) in an output."""

    collective: str = Field(description="collective name, e.g. all_reduce")
    binary: str | None = Field(default=None, description="program name, e.g. all_reduce_perf")
    tool: str | None = Field(default=None, description="e.g. 'nccl-tests 2.19.6'")
    nccl_version: int | None = None
    layout: Layout = "unknown"
    time_kind: Literal["time", "cputime"] = "time"
    ngpus: int | None = Field(default=None, description="GPUs per thread (nGpus of the header)")
    validation: bool | None = None
    devices: list[NcclDevice] = Field(default_factory=list)
    columns: list[str] = Field(default_factory=list, description="column names of the table header")
    rows: list[NcclRow] = Field(default_factory=list)
    out_of_bounds: int | None = None
    bitwise_mismatches: int | None = None
    avg_busbw: float | None = None
    avg_busbw_ok: bool | None = Field(default=None, description="the -a check; None when unchecked")
    concluded: bool = False
    errors: list[str] = Field(default_factory=list)

    @property
    def sizes(self) -> list[int]:
        """Message sizes of the rows, in order."""
        return [row.size for row in self.rows]

    @property
    def peak_busbw(self) -> float | None:
        """Highest bus bandwidth of any row and placement."""
        values = [b for row in self.rows for b in (row.oop_busbw, row.ip_busbw) if b is not None]
        return max(values) if values else None

    @property
    def peak_row(self) -> NcclRow | None:
        """The row holding the highest bus bandwidth."""
        scored = [(top, row) for row in self.rows if (top := row.busbw_max()) is not None]
        return max(scored, key=lambda pair: pair[0])[1] if scored else None

    @property
    def total_wrong(self) -> int | None:
        """Wrong elements over all rows; None when no row was checked."""
        values = [row.wrong for row in self.rows if row.wrong is not None]
        return sum(values) if values else None

    @property
    def nranks(self) -> int | None:
        """Number of ranks listed in the device report."""
        return len(self.devices) or None


class NcclRun(BaseModel):
    """Everything read from one saved output (text or -J JSON)."""

    source: Literal["text", "json"] = "text"
    tests: list[NcclTest] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list, description="errors not tied to one test")
    warnings: list[str] = Field(default_factory=list, description="NCCL WARN lines")
    exit_code: int | None = None

    def all_errors(self) -> list[str]:
        """Top-level errors and each test's errors, the latter prefixed with the collective."""
        found = list(self.errors)
        for test in self.tests:
            found.extend(f"{test.collective}: {err}" for err in test.errors)
        return found

    @property
    def ok(self) -> bool:
        """True when the output parsed without any error."""
        return not self.all_errors()

    def test(self, collective: str) -> NcclTest | None:
        """First test of the given collective, if any."""
        return next((t for t in self.tests if t.collective == collective), None)
