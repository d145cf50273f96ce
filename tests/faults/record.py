"""What the fault-injection suite measured: one JSON line per fault kind and run, and the docs/faults.md table from them.

Each test records, for its fault: how many times it was injected, how many times the cluster recovered
(converged to the desired state with every invariant holding), how many managed files were found neither the old
nor the new content (must be 0), how many jobs were killed (must be 0), and the seconds from the end of each fault
to convergence. Results go to ``$RECONCILER_FAULTS_OUT`` (default ``/tmp/reconciler-faults/results.jsonl``);
``python -m tests.faults.record`` prints the Markdown table that docs/faults.md and bench/README.md carry.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_OUT = Path("/tmp/reconciler-faults/results.jsonl")


def out_path() -> Path:
    """Where results are appended."""
    return Path(os.environ.get("RECONCILER_FAULTS_OUT") or DEFAULT_OUT)


@dataclass
class FaultTally:
    """Counts for one fault kind over its repetitions."""

    fault: str
    seed: int
    injected: int = 0
    recovered: int = 0
    torn_files: int = 0
    jobs_killed: int = 0
    converge_s: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def injection(self, recovered: bool, converge_s: float | None = None, torn_files: int = 0,
                  jobs_killed: int = 0, note: str = "") -> None:
        """Count one injection and what followed it."""
        self.injected += 1
        self.recovered += int(recovered)
        self.torn_files += torn_files
        self.jobs_killed += jobs_killed
        if converge_s is not None:
            self.converge_s.append(round(converge_s, 2))
        if note:
            self.notes.append(note)

    def write(self) -> None:
        """Append this tally to the results file."""
        path = out_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        row = {**asdict(self), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": f"{platform.node()} ({os.cpu_count()} cores)"}
        with path.open("a") as out:
            out.write(json.dumps(row) + "\n")


def _seconds(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} (max {max(values):.1f})"


def table(rows: list[dict[str, object]]) -> str:
    """The Markdown table of the newest row per fault."""
    newest: dict[str, dict[str, object]] = {}
    for row in rows:
        newest[str(row["fault"])] = row
    runs = any("run" in row for row in newest.values())  # rows gathered from several runs say which
    lines = ["| fault | injected | recovered | files neither old nor new | jobs killed | converge after fault, s "
             "(median, max) |" + (" run |" if runs else ""), "|---|---:|---:|---:|---:|---|" + ("---|" if runs else "")]
    for fault, row in newest.items():
        converge = [float(v) for v in row.get("converge_s", []) or []]  # type: ignore[union-attr]
        lines.append(f"| {fault} | {row['injected']} | {row['recovered']} | {row['torn_files']} | "
                     f"{row['jobs_killed']} | {_seconds(converge)} |" + (f" {row.get('run', '')} |" if runs else ""))
    return "\n".join(lines)


def main() -> int:
    """Print the table of the results file (or of the file named as the argument)."""
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else out_path()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
