"""One daemon's steady-state drift checks, timed: `python -m bench.drift_probe DESIRED WORK [FORKS]`.

The daemon's own reconcile loop (`reconciler.daemon.loop.Reconciler`) in report mode, watching DESIRED,
with persistent SSH sessions (`Sessions`, as `reconciler run` sets them up); no workers (the testbed's
desired state has checks on a 10 min interval, none due) and no metrics server. A first cycle opens the
connections; then one drift check per line read on stdin, each one `cycle("drift", force=True)`: what the
daemon does when the drift interval comes (hash and load the desired state, gather over the open sessions,
plan, record in state.db, export metrics). Each is timed: wall, CPU of this process (every thread) plus its
live ProxyCommand children (/proc), and the gather and plan inside it. Every check must say in-sync and open
no connection. Prints a JSON line per cycle on stdout; the daemon's JSON log goes to WORK/daemon.log.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.floor import self_cpu
from reconciler.daemon import logs
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.sessions import Sessions
from reconciler.daemon.store import Store
from reconciler.engine.run import Reconcile

IDLE_TIMEOUT = 600.0


def _timing(phases: dict[str, float]) -> None:
    """Time Reconcile.gather and Reconcile.plan (the last call of each) into PHASES."""
    for name in ("gather", "plan"):
        original = getattr(Reconcile, name)

        def timed(self: Reconcile, *args: Any, _original: Any = original, _name: str = name) -> Any:
            start = time.perf_counter()
            try:
                return _original(self, *args)
            finally:
                phases[_name] = time.perf_counter() - start

        setattr(Reconcile, name, timed)


class Probe:
    """The daemon's reconcile loop over persistent sessions, set up as `reconciler run` does (report mode)."""

    def __init__(self, desired: Path, work: Path, forks: int | None = None) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.log_stream = (work / "daemon.log").open("a")
        logs.configure("json", stream=self.log_stream)
        ssh = {"forks": forks} if forks else {}
        config = DaemonConfig.model_validate({"watch": str(desired), "mode": "report", "drift_interval": "1h",
                                              "state_dir": str(work / "state"), "metrics_listen": None,
                                              "log_format": "json", "ssh": ssh, "ssh_idle_timeout": "10m"})
        config.state_path.mkdir(parents=True, exist_ok=True)
        self.store = Store(config.state_path / "state.db")
        self.reconciler = Reconciler(config, self.store, Metrics(), threading.Event(), config_dir=work,
                                     sessions=Sessions(IDLE_TIMEOUT))
        self.phases: dict[str, float] = {}
        _timing(self.phases)

    def first(self) -> dict[str, Any]:
        """The first cycle (opens the connections)."""
        start = time.perf_counter()
        outcome = self.reconciler.cycle("start", force=True)
        return {"outcome": outcome, "wall_s": time.perf_counter() - start,
                "connects": self.reconciler.sessions.total_connects()}

    def check(self) -> dict[str, Any]:
        """One drift check, timed."""
        cpu, start = self_cpu(), time.perf_counter()
        outcome = self.reconciler.cycle("drift", force=True)
        wall, used = time.perf_counter() - start, self_cpu() - cpu
        return {"wall_s": wall, "cpu_s": used, "outcome": outcome, "gather_s": self.phases.get("gather", 0.0),
                "plan_s": self.phases.get("plan", 0.0), "connects": self.reconciler.sessions.total_connects()}

    def close(self) -> None:
        """Close the sessions and the store."""
        self.reconciler.sessions.close()
        self.store.close()
        self.log_stream.close()


def main(argv: list[str]) -> None:
    """Print the first cycle as a JSON line, then one JSON line per drift check, one per line read on stdin."""
    forks = int(argv[2]) if len(argv) > 2 else None
    probe = Probe(Path(argv[0]), Path(argv[1]), forks)
    try:
        print(json.dumps(probe.first()), flush=True)
        for _ in sys.stdin:
            print(json.dumps(probe.check()), flush=True)
    finally:
        probe.close()


if __name__ == "__main__":
    main(sys.argv[1:])
