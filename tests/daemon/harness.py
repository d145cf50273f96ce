"""Helpers for the daemon tests: a Git remote with a work clone, and a `reconciler run` subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GIT_ENV = {"GIT_AUTHOR_NAME": "admin", "GIT_AUTHOR_EMAIL": "admin@example.org", "GIT_COMMITTER_NAME": "admin",
           "GIT_COMMITTER_EMAIL": "admin@example.org"}


def git(cwd: Path, *args: str) -> str:
    """Run git in a directory; return stdout."""
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                         env={**os.environ, **GIT_ENV})
    assert out.returncode == 0, f"git {' '.join(args)}: {out.stderr}"
    return out.stdout.strip()


@dataclass
class GitRemote:
    """A bare repository (the 'server') and an admin's clone of it."""

    bare: Path
    work: Path

    @classmethod
    def create(cls, root: Path, files: Path) -> GitRemote:
        """Make a bare repo whose first commit holds the files of `files` (a desired-state dir)."""
        bare, work = root / "remote.git", root / "work"
        git(root, "init", "-q", "--bare", "-b", "main", str(bare))
        git(root, "clone", "-q", str(bare), str(work))
        shutil.copytree(files, work, dirs_exist_ok=True)
        git(work, "checkout", "-q", "-b", "main")
        git(work, "add", "-A")
        git(work, "commit", "-qm", "initial desired state")
        git(work, "push", "-q", "origin", "main")
        return cls(bare, work)

    def commit(self, message: str, edits: dict[str, Callable[[str], str]]) -> str:
        """Edit files (name -> text transform), commit and push; return the new commit."""
        for name, edit in edits.items():
            path = self.work / name
            path.write_text(edit(path.read_text() if path.exists() else ""))
        git(self.work, "add", "-A")
        git(self.work, "commit", "-qm", message)
        git(self.work, "push", "-q", "origin", "main")
        return self.head()

    def head(self) -> str:
        """The work clone's HEAD."""
        return git(self.work, "rev-parse", "HEAD")


@dataclass
class DaemonProcess:
    """`reconciler run --config CONFIG` as a real subprocess, logging JSON lines to a file."""

    config: Path
    state_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # added to this process's environment

    def start(self) -> DaemonProcess:
        """Start the daemon."""
        self.log_handle = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "run", "--config", str(self.config),
                                      *self.extra_args], cwd=REPO, stdout=self.log_handle, stderr=self.log_handle,
                                     env={**os.environ, **self.env})
        return self

    def events(self) -> list[dict[str, Any]]:
        """Every JSON log line written so far."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out

    @staticmethod
    def event_time(event: dict[str, Any]) -> float:
        """An event's log time stamp, epoch seconds."""
        return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()

    def runs_ended(self, trigger: str | None = None) -> list[dict[str, Any]]:
        """The run.end events whose run.start had this trigger (all when None), oldest first."""
        events = self.events()
        starts = {e["run_id"]: e["trigger"] for e in events if e["event"] == "run.start"}
        return [e for e in events if e["event"] == "run.end" and (trigger is None or starts.get(e["run_id"]) == trigger)]

    def status(self) -> dict[str, Any]:
        """What `reconciler status --format json` prints (an empty status before the daemon created its database).

        Read in this process through the command's own function and JSON encoding: wait_for polls it every 0.2 s,
        and a CLI process each time cost 0.7 s of CPU on a 2-core CI machine. test_status_json_is_the_cli_output
        checks that both agree."""
        from reconciler.cli.daemon import status_data

        if not (self.state_dir / "state.db").exists():
            return {"applied_commit": None, "head": {}, "drift": [], "last_run": None}
        return json.loads(json.dumps(status_data(self.state_dir), indent=2, default=str))

    def status_from_cli(self) -> dict[str, Any]:
        """`reconciler status --format json`, run as a command."""
        out = subprocess.run([sys.executable, "-m", "reconciler.cli", "status", "--state-dir", str(self.state_dir),
                              "--format", "json"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def wait_for(self, what: str, predicate: Callable[[], Any], timeout: float = 90.0) -> Any:
        """Poll until predicate() is truthy; fail with the daemon's log tail otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            assert self.proc is None or self.proc.poll() is None, f"daemon exited: {self.log_tail()}"
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; daemon log:\n{self.log_tail()}")

    def wait_check_passes(self, check: str, node: str, timeout: float = 120.0) -> None:
        """Wait until a CHECK result on NODE logged from now on passes. A node drained by a check is resumed for
        good only then: to retest it the daemon resumes it inside a reservation first, and drains it again if the
        retest fails or is cut short (a daemon stopped), so "no DRAIN" alone is not a resume."""
        seen = len(self.events())
        self.wait_for(f"{check} passes on {node}", lambda: any(
            e.get("event") == "check.result" and e.get("check") == check and e.get("node") == node and e.get("ok")
            for e in self.events()[seen:]), timeout)

    def wait_applied(self, commit: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the daemon reports `commit` applied (or in sync) and the run that did so has ended; return the
        status read after that.

        A run writes applied_commit before its end (mark_applied, then the run's row, metrics and run.end): a test
        that read any of those at once raced the daemon. Every run started before applied_at is waited for."""
        def applied_and_ended() -> dict[str, Any] | None:
            first = self.status()
            if first["applied_commit"] != commit or self.runs_open(started_by=first["applied_at"]):
                return None
            then = self.status()
            return then if then["applied_commit"] == commit else None

        return self.wait_for(f"commit {commit[:12]} applied and its run ended", applied_and_ended, timeout)

    def runs(self, commit: str | None = None) -> list[dict[str, Any]]:
        """The rows of the daemon's runs table (of COMMIT, when given), oldest first: started and ended are wall-clock
        seconds, as the daemon wrote them (not when a poll of the test saw them)."""
        with contextlib.closing(sqlite3.connect(self.state_dir / "state.db", timeout=30)) as conn:
            conn.row_factory = sqlite3.Row
            rows = conn.execute("SELECT * FROM runs WHERE ? IS NULL OR commit_sha = ? ORDER BY id", (commit, commit))
            return [dict(row) for row in rows]

    def runs_open(self, started_by: float) -> int:
        """How many runs that started at or before STARTED_BY (wall clock) have not ended."""
        return sum(1 for r in self.runs() if r["ended"] is None and r["started"] <= started_by)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the daemon's log."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def signal(self, signum: int) -> None:
        """Send a signal to the daemon."""
        assert self.proc is not None
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 40.0) -> float:
        """SIGTERM and wait; return how long the exit took."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.log_handle.close()
        return time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log_handle.close()


def write_config(path: Path, **values: Any) -> Path:
    """Write a daemon config file (YAML is a superset of JSON)."""
    path.write_text(json.dumps(values, indent=2) + "\n")
    return path
