"""The daemon side of the fault suite: a factory of `reconciler run` daemons on the fault bed's Git remote, and
what the daemon fault tests share (push a new payload, wait for convergence, the starting point of a test)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from tests.daemon.harness import DaemonProcess, git, write_config
from tests.faults.bed import COMPUTES, FaultBed, wait_until
from tests.faults.record import FaultTally
from tests.transport.sshd_server import free_port


class Daemons:
    """Daemons on the fault bed's remote, each with its own state directory; all killed at the end."""

    def __init__(self, bed: FaultBed) -> None:
        self.bed = bed
        self.started: list[DaemonProcess] = []
        self.count = 0

    def start(self, state_dir: Path | None = None, env: dict[str, str] | None = None, **config: Any) -> DaemonProcess:
        """`reconciler run` in enforce mode, polling every second."""
        self.count += 1
        state_dir = state_dir or self.bed.root / f"dstate{self.count}"
        values: dict[str, Any] = {"repository": {"url": str(self.bed.remote.bare), "branch": "main"},
                                  "mode": "enforce", "poll_interval": "1s", "drift_interval": "10m",
                                  "state_dir": str(state_dir), "metrics_listen": f"127.0.0.1:{free_port()}",
                                  "log_format": "json", "retry": {"initial": "1s", "max": "3s"}}
        values.update(config)
        path = write_config(self.bed.root / f"dconfig{self.count}.yaml", **values)
        daemon = DaemonProcess(config=path, state_dir=state_dir, log_path=self.bed.root / f"daemon{self.count}.log",
                               env=env or {}).start()
        self.started.append(daemon)
        return daemon

    def restart(self, daemon: DaemonProcess) -> DaemonProcess:
        """The same daemon (config, state, log) started again."""
        again = DaemonProcess(config=daemon.config, state_dir=daemon.state_dir, log_path=daemon.log_path,
                              env=daemon.env).start()
        self.started.append(again)
        return again


def push_version(bed: FaultBed, edit_cluster: bool = False, extra: dict[str, str] | None = None) -> str:
    """Bump the payload, copy the desired state into the remote's clone, commit and push; the commit."""
    bed.bump(edit_cluster)
    for name in ("faults.yaml", "cluster.yaml"):
        shutil.copy(bed.desired / name, bed.remote.work / name)
    for name, text in (extra or {}).items():
        (bed.remote.work / name).write_text(text)
    git(bed.remote.work, "add", "-A")
    git(bed.remote.work, "commit", "-qm", f"payload {bed.version}")
    git(bed.remote.work, "push", "-q", "-f", "origin", "HEAD:main")
    return bed.remote.head()


def alive(daemon: DaemonProcess) -> bool:
    """The daemon process still runs."""
    return daemon.proc is not None and daemon.proc.poll() is None


def events(daemon: DaemonProcess, name: str) -> list[dict[str, Any]]:
    """The daemon's JSON log events called NAME."""
    return [e for e in daemon.events() if e.get("event") == name]


def converged(bed: FaultBed, daemon: DaemonProcess, commit: str, timeout: float = 120) -> float | None:
    """Seconds until the daemon reports COMMIT applied and every node holds the current payload; None if not."""
    started = time.monotonic()
    ok = wait_until(lambda: daemon.status().get("applied_commit") == commit
                    and bed.versions() == dict.fromkeys(COMPUTES, bed.version), timeout, step=0.5)
    return time.monotonic() - started if ok else None


def baseline(bed: FaultBed, daemons: Daemons) -> tuple[DaemonProcess, str]:
    """A daemon that has applied a fresh head (the starting point of a fault test)."""
    bed.start_sentinels(COMPUTES)
    commit = push_version(bed)
    daemon = daemons.start()
    assert converged(bed, daemon, commit, 180) is not None, daemon.log_tail()
    return daemon, commit


def assert_clean(tally: FaultTally) -> None:
    """Every injection counted recovered, with no torn file and no killed job."""
    assert tally.injected > 0
    assert tally.torn_files == 0, tally
    assert tally.jobs_killed == 0, tally
    assert tally.recovered == tally.injected, tally
