"""HOOK for issue 8 item 3, commit-to-applied latency of the daemon (poll and watch modes): not built yet.

Whoever builds it: implement `run(nodes, runs)` to return one row per (mode, N) with at least
`mode`, `computes`, `runs`, `latency_s` (median seconds from `git commit` to the change applied on every
node) and `latency_runs_s`; then add its table to `bench.report.tables` (a "daemon" entry is already
reserved there) and its curve to `bench.report.plot`. `python -m bench --sections daemon` calls it; the
testbed helper `bench.testbed.BenchTestbed` gives a converged testbed and its desired state to start from.
"""

from __future__ import annotations

from typing import Any


class NotBuilt(Exception):
    """The daemon-latency section does not exist yet."""


def run(nodes: list[int], runs: int) -> list[dict[str, Any]]:
    """Commit-to-applied latency per mode and N (issue 8 item 3): not implemented yet."""
    raise NotBuilt("daemon latency (issue 8 item 3) is not measured yet: see bench/daemon.py")
