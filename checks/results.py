"""The outcome of one health check on one node: what the store keeps and the CLI prints."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from reconciler.common import clock

CheckKind = Literal["node", "nccl"]


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the daemon's clock: reconciler/common/clock.py)."""
    return clock.utcnow()


class CheckResult(BaseModel):
    """One check (a node check or an NCCL run) judged on one node.

    `ok` is the verdict. A `skipped` result ran nothing (node busy, drained by someone else) and counts
    as ok; an `error` result could not judge the node (unreachable, srun could not allocate) and counts
    as not ok, but never drains a node: only a failure the node is to blame for does.
    """

    check: str = Field(description="The check's name in the desired state")
    kind: CheckKind
    node: str
    ok: bool
    message: str = Field(description="One line: what failed, or a summary of what passed")
    value: float | None = Field(default=None, description="nccl: representative busbw in GB/s")
    gpu_seconds: float | None = Field(default=None, description="nccl: GPUs x wall seconds of the run")
    started: datetime = Field(default_factory=utcnow)
    duration: float = Field(default=0.0, ge=0, description="seconds")
    skipped: bool = False
    error: bool = False
    details: list[str] = Field(default_factory=list, description="one line per item checked")
    job_id: str | None = Field(default=None, description="nccl: the Slurm job that ran the test")

    @model_validator(mode="after")
    def _consistent(self) -> CheckResult:
        if self.skipped and not self.ok:
            raise ValueError("a skipped result is ok")
        if self.error and self.ok:
            raise ValueError("an error result is not ok")
        return self

    @property
    def failed(self) -> bool:
        """True when the node itself failed the check (not skipped, not an error)."""
        return not self.ok and not self.error

    @property
    def status(self) -> str:
        """PASS, FAIL, ERROR or SKIP."""
        if self.skipped:
            return "SKIP"
        if self.error:
            return "ERROR"
        return "PASS" if self.ok else "FAIL"

    def line(self) -> str:
        """One line for humans: status, check, node, figures and message."""
        figures = []
        if self.value is not None:
            figures.append(f"{self.value:.1f} GB/s")
        if self.gpu_seconds is not None:
            figures.append(f"{self.gpu_seconds:.1f} GPU-s")
        extra = f" [{', '.join(figures)}]" if figures else ""
        return f"{self.status:<5} {self.kind:<4} {self.check} {self.node}: {self.message}{extra}"
