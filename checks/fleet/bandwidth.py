"""A node's NCCL bus bandwidth over time, from the NCCL checks' own results: which nodes are sliding.

A slide compares the mean of the node's last third of runs with the mean of its first third (at least 6 runs of
one check): a node whose bandwidth fell by the threshold or more is named, with both means and the runs' span. A
run that failed outright is left out (its drain says enough); a slow decline is what passes each run's own
threshold and still deserves a look.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime

from reconciler.checks.store import busbw_series

MIN_RUNS = 6


@dataclass(frozen=True)
class Slide:
    """NODE's CHECK bandwidth fell from FIRST to LAST GB/s (means of the first and last thirds) over RUNS runs."""

    node: str
    check: str
    first: float
    last: float
    runs: int
    start: datetime
    end: datetime

    @property
    def drop(self) -> float:
        """Per cent fallen."""
        return (self.first - self.last) / self.first * 100 if self.first > 0 else 0.0

    def text(self) -> str:
        """`node gpu03: nccl-pairs bus bandwidth 410.2 -> 331.0 GB/s (-19%) over 12 runs`."""
        return (f"node {self.node}: {self.check} bus bandwidth {self.first:.1f} -> {self.last:.1f} GB/s "
                f"(-{self.drop:.0f}%) over {self.runs} runs")


def trend(series: list[tuple[datetime, float, bool]]) -> tuple[float, float, int] | None:
    """(first third's mean, last third's mean, runs) of the passing runs; None with fewer than MIN_RUNS."""
    values = [v for _, v, ok in series if ok]
    if len(values) < MIN_RUNS:
        return None
    third = len(values) // 3
    return sum(values[:third]) / third, sum(values[-third:]) / third, len(values)


def slides(conn: sqlite3.Connection, threshold: float, checks: list[str] | None = None) -> list[Slide]:
    """Nodes whose NCCL bandwidth fell THRESHOLD per cent or more (of CHECKS, default all), worst first."""
    try:
        series = busbw_series(conn)
    except sqlite3.OperationalError:  # no check has run here yet
        return []
    out: dict[str, Slide] = {}
    for (check, node), points in series.items():
        if checks is not None and check not in checks:
            continue
        found = trend(points)
        if found is None:
            continue
        first, last, runs = found
        slide = Slide(node, check, first, last, runs, points[0][0], points[-1][0])
        if slide.drop >= threshold and (node not in out or slide.drop > out[node].drop):
            out[node] = slide
    return sorted(out.values(), key=lambda s: -s.drop)
