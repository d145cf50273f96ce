"""A 16-compute-node testbed with real Slurm, its desired state in a Git remote, a daemon factory, a webhook.

The desired state is the engine tests' one plus `Prolog=/etc/slurm/prolog.sh` (the patch `prolog` keeps that
script) and a rollout of three waves (canary 1, then 50%, then 100%) with a short soak.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.harness import DaemonProcess, GitRemote, write_config
from tests.engine.conftest import Bed
from tests.engine.testbed_state import write_state
from tests.testbed_fixture import Testbed
from tests.transport.sshd_server import free_port

COMPUTES = [f"gpu{i:02d}" for i in range(1, 17)]
ROLLOUT = """\
rollout:
  canary: 1
  steps: ["50%", "100%"]
  soak: 2s
  gates:
    timeout: 90s
"""
GOOD_PROLOG = "#!/bin/sh\nexit 0\n"


class Webhook:
    """A local HTTP receiver: what Apprise's json:// posts (title, body, type), in arrival order."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        received = self.messages

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    received.append(json.loads(body))
                except ValueError:
                    received.append({"raw": body.decode(errors="replace")})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        """The Apprise URL of this receiver."""
        return f"json://127.0.0.1:{self.port}/"

    def titled(self, word: str) -> list[dict[str, Any]]:
        """Messages whose title or body holds WORD."""
        return [m for m in self.messages if word in str(m.get("title", "")) + str(m.get("message", ""))]


@dataclass
class RolloutBed:
    """The testbed, the Git remote of its desired state, a webhook, and a factory of daemons."""

    bed: Bed
    remote: GitRemote
    root: Path
    webhook: Webhook
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    started: list[DaemonProcess] = field(default_factory=list)

    def daemon(self, state_dir: Path | None = None, failpoints: str = "", **config: Any) -> DaemonProcess:
        """Start `reconciler run` (enforce, 1 s polls) on the remote; STATE_DIR: reuse one (a restart);
        FAILPOINTS: RECONCILER_FAILPOINTS for it (reconciler/common/failpoints.py)."""
        n = next(self.counter)
        state_dir = state_dir or self.root / f"state{n}"
        values: dict[str, Any] = {"repository": {"url": str(self.remote.bare), "branch": "main"},
                                  "mode": "enforce", "poll_interval": "1s", "drift_interval": "1h",
                                  "state_dir": str(state_dir), "metrics_listen": f"127.0.0.1:{free_port()}",
                                  "log_format": "json", "retry": {"initial": "2s", "max": "10s"},
                                  "checks_after_apply": False,
                                  "notifications": {"targets": [{"url": self.webhook.url}], "rate_limit": "1s"}}
        values.update(config)
        path = write_config(self.root / f"config{n}.yaml", **values)
        daemon = DaemonProcess(config=path, state_dir=state_dir, log_path=self.root / f"daemon{n}.log",
                               env={"RECONCILER_FAILPOINTS": failpoints} if failpoints else {}).start()
        self.started.append(daemon)
        return daemon

    @property
    def computes(self) -> list[str]:
        """The compute nodes of this bed (COMPUTES on the package's bed)."""
        return self.bed.testbed.computes

    @property
    def slurm(self) -> str:
        """The bed's Slurm release."""
        return self.bed.testbed.slurm

    def close(self) -> None:
        """Kill every daemon this bed started and stop its webhook (the testbed goes with the session's)."""
        for daemon in self.started:
            daemon.kill()
        self.webhook.server.shutdown()

    def exec(self, node: str, command: str, check: bool = True) -> str:
        """Run a command inside a node; its stdout."""
        return self.bed.exec(node, command, check=check).stdout

    def on_all(self, command: str) -> dict[str, str]:
        """COMMAND's stdout on every compute node."""
        return {n: self.exec(n, command, check=False).strip() for n in self.computes}

    def drained(self) -> dict[str, str]:
        """Drained/draining compute nodes and their reasons, from sinfo."""
        out = self.exec("ctl", "sinfo -h -N -R -o '%N|%E'", check=False)
        return {n: r for line in out.splitlines() if "|" in line for n, r in [line.split("|", 1)]}


def journal(state_dir: Path) -> dict[str, Any] | None:
    """The rollout in flight, read from the daemon's SQLite store (None when none or no store yet)."""
    path = state_dir / "state.db"
    if not path.exists():
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key='rollout_journal'").fetchone()
    except sqlite3.Error:
        return None
    value = json.loads(row[0]) if row else None
    return value if isinstance(value, dict) else None


def make_rbed(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory, nodes: int = 16,
              slurm: str = "") -> RolloutBed:
    """A bare testbed of NODES compute nodes (SLURM: its release, default the host's) configured by a first daemon
    (Slurm does not answer yet: one ungated wave)."""
    testbed = testbed_factory(nodes=nodes, bare=True, slurm=slurm)
    desired = write_state(tmp_path_factory.mktemp("desired"), name="rtrol", state_dir=testbed.state_dir,
                          subnet=testbed.subnet, computes=f"gpu[01-{nodes:02d}]", slurm=testbed.slurm)
    cluster = desired / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("    SlurmdParameters: config_overrides\n",
                                                   "    SlurmdParameters: config_overrides\n"
                                                   "    Prolog: /etc/slurm/prolog.sh\n"))
    (desired / "rollout.yaml").write_text(ROLLOUT)
    root = tmp_path_factory.mktemp("rollout")
    remote = GitRemote.create(root, desired)
    state = RolloutBed(Bed(testbed=testbed, desired=desired), remote, root, Webhook())
    first = state.daemon()
    first.wait_applied(remote.head(), timeout=300)
    first.stop()
    testbed.wait_idle(timeout=120)
    return state


@pytest.fixture(scope="package")
def rbed(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolloutBed]:
    """Bare 16-node testbed of the host's Slurm release; a first daemon configures it."""
    state = make_rbed(testbed_factory, tmp_path_factory)
    yield state
    state.close()
