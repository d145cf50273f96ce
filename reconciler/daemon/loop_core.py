"""The reconcile loop's core: what it holds (config, store, sessions, workers, notifier, pair role), its role in a
pair, and its notifications. The loop's jobs build on it: loop_source (the target), loop_checks (drift and health-check
scheduling), loop_prs (PR reports), loop_apply (applies, rollouts, run records) and loop (the cycle itself)."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from reconciler.checks import store as check_store
from reconciler.daemon import notify
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.leadership import take_over
from reconciler.daemon.loop_state import LoopState, Target
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.notify import Message, Notifier
from reconciler.daemon.sessions import Sessions
from reconciler.daemon.store import Store
from reconciler.daemon.workers import Background, Gate
from reconciler.desired.agesecrets import load_identities
from reconciler.desired.loader import LoadedState
from reconciler.ha.lease import LeaseError
from reconciler.ha.role import HighAvailability
from reconciler.model import DesiredState


class LoopCore:
    """One daemon's reconcile state and role; the loop's jobs are the subclasses (reconciler.daemon.loop.Reconciler)."""

    def __init__(self, config: DaemonConfig, store: Store, metrics: Metrics, stop: Any,
                 config_dir: Path | None = None) -> None:
        self.config, self.store, self.metrics, self.stop = config, store, metrics, stop
        self.config_dir = config_dir or Path.cwd()
        self.log = structlog.get_logger("reconciler")
        self.source = (GitSource(config.repository, config.state_path / "repo", config.signing)
                       if config.repository else None)
        self.state = LoopState(good=store.get("good_commit"), applied=store.get("applied_commit"),
                               seen_head=store.get("seen_head"))
        self.last_state: DesiredState | None = None
        self.applied_target: Target | None = None  # the applied commit's desired state, what a rollback returns to
        self.check_target: LoadedState | None = None  # what the check worker checks: the last reconciled state
        self.check_attempts: dict[str, datetime] = {}
        self.check_clock: dict[str, float] = {}  # check -> time.monotonic() when this process last started it
        self.last_pr_report: float | None = None  # time.monotonic()
        self.forge: Any = None
        # SSH sessions: fresh per cycle unless the daemon gives persistent ones; workers: None in --once mode
        # (checks and PR reports then run inline after the cycle, as the one-shot always did).
        self.sessions = Sessions(0)
        self.gate = Gate()
        self.background: Background | None = None
        self._connects_seen = 0
        self.notifier = Notifier(config.notifications, self.config_dir) if config.notifications else None
        # The identity that decrypts the desired state's .age files (read once: `run` checked it can be read).
        self.age_identity = str(self.config_dir / config.age_identity) if config.age_identity else None
        self.age_identities = load_identities(self.age_identity) if self.age_identity else None
        # Two login nodes (config `ha:`): the role, the desired state the lease thread reaches the lease node with,
        # and the term whose takeover was done (reconciler/daemon/leadership.py). None: a single daemon.
        self.ha: HighAvailability | None = None
        self.ha_loaded: LoadedState | None = None
        self._acted_epoch: int | None = None
        self._source_failing_since: float | None = None  # first of the current run of failed fetches
        self._source_down_sent = False
        head = store.get("head_status") or {}
        metrics.source_ok.set(1 if head.get("status") == "valid" else 0)  # a restart keeps the last verdict
        with contextlib.suppress(sqlite3.Error):  # a restart keeps the GPU faults of the latest results too
            metrics.set_gpu_faults(check_store.latest(store.conn))

    # ------------------------------------------------------------ role (one daemon, or one of a pair)

    def acts(self) -> bool:
        """Whether this daemon may change the cluster: a single daemon always, one of a pair while it leads."""
        return self.ha is None or self.ha.is_leader()

    @property
    def mode(self) -> str:
        """The configured mode while acting; `report` on a standby."""
        return self.config.mode if self.acts() else "report"

    def takeover_due(self) -> bool:
        """Whether this daemon became the leader and has not taken over yet (the loop runs a cycle at once)."""
        return self.ha is not None and self.ha.is_leader() and self.ha.epoch != self._acted_epoch

    def _leadership(self, target: Target) -> bool:
        """Renew or take the lease (first cycle), take over when newly leader; True when a takeover happened."""
        assert self.ha is not None
        self.ha_loaded = target.loaded
        if not self.ha.started:
            self.ha.tick()
            self.ha.start(self.stop)
        if not self.takeover_due():
            return False
        epoch = self.ha.epoch
        try:
            take_over(self, self.ha)
        except LeaseError as exc:  # without the predecessor's journal it is not safe to act: let the term go
            self.log.error("ha.takeover_failed", error=str(exc), epoch=epoch)
            self.ha.step_down(f"could not read the crash journal: {exc}")
            return False
        self._acted_epoch = epoch
        return True

    def _count_connects(self) -> None:
        """Export the SSH connections opened since the last look (reconciler_ssh_connects_total)."""
        total = self.sessions.total_connects()
        if total > self._connects_seen:
            self.metrics.ssh_connects.inc(total - self._connects_seen)
        self._connects_seen = total

    # ------------------------------------------------------------ notifications (reconciler/daemon/notify.py)

    def _notify(self, build: Callable[[], Message | None]) -> None:
        """Build and queue a message when notifications are configured (never blocks, never raises); a standby
        sends none (its leader sends the same ones)."""
        if self.notifier is None or not self.acts():
            return
        try:  # called from inside applies, rollouts and checks: a message must never stop them
            self.notifier.send(build())
        except Exception as exc:  # noqa: BLE001
            self.log.exception("notify.error", error=f"{type(exc).__name__}: {exc}")

    def notify_event(self, kind: str, data: dict[str, Any], target: Target) -> None:
        """A rollout's start, end or rollback as one message (waves and the failure before a rollback: none)."""
        self._notify(lambda: notify.rollout_message(kind, data, target.loaded.state.cluster.name, target.subject))


def step_fields(line: str) -> dict[str, str]:
    """Split an applier line `node: what` into log fields."""
    node, sep, what = line.partition(": ")
    if sep and " " not in node:
        return {"node": node, "step": what}
    return {"step": line}


def new_run_id() -> str:
    """A fresh run id (the runs table's key, bound to every log line of the run)."""
    return uuid.uuid4().hex[:12]
