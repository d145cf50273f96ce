"""What every part of the reconcile loop shares: the daemon's basics (Common), its role in a pair (Role) and its
notifications (Notices). The parts are objects the loop (loop.py) holds: the schedule (loop_schedule), the target
source (loop_source), health checks (loop_checks), PR reports (loop_prs), applies and rollouts (loop_apply) and the
promotion gate (loop_promotion); each is handed what it uses when the loop builds it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.daemon import notify
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop_state import Target
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.notify import Message, Notifier
from reconciler.daemon.store import Store
from reconciler.ha.role import HighAvailability


@dataclass
class Common:
    """What every part of the loop uses: the daemon config (replaced on SIGHUP), the state database, the metrics, the
    log, the stop event (SIGTERM) and the directory relative config paths are read from."""

    config: DaemonConfig
    store: Store
    metrics: Metrics
    stop: Any
    config_dir: Path
    log: Any


class Role:
    """This daemon's place: a single daemon (ha None) always acts; one of a pair (config `ha:`) acts while it leads."""

    def __init__(self) -> None:
        self.ha: HighAvailability | None = None
        self.acted_epoch: int | None = None  # the term whose takeover was done (reconciler/daemon/leadership.py)

    def acts(self) -> bool:
        """Whether this daemon may change the cluster: a single daemon always, one of a pair while it leads."""
        return self.ha is None or self.ha.is_leader()

    def mode(self, configured: str) -> str:
        """The CONFIGURED mode while acting; `report` on a standby."""
        return configured if self.acts() else "report"

    def takeover_due(self) -> bool:
        """Whether this daemon became the leader and has not taken over yet (the loop runs a cycle at once)."""
        return self.ha is not None and self.ha.is_leader() and self.ha.epoch != self.acted_epoch


class Notices:
    """The loop's notifications (reconciler/daemon/notify.py): queued, never blocking; a standby sends none."""

    def __init__(self, notifier: Notifier | None, role: Role, log: Any) -> None:
        self.notifier, self.role, self.log = notifier, role, log

    def send(self, build: Callable[[], Message | None]) -> None:
        """Build and queue a message when notifications are configured (never blocks, never raises); a standby
        sends none (its leader sends the same ones)."""
        if self.notifier is None or not self.role.acts():
            return
        try:  # called from inside applies, rollouts and checks: a message must never stop them
            self.notifier.send(build())
        except Exception as exc:  # noqa: BLE001
            self.log.exception("notify.error", error=f"{type(exc).__name__}: {exc}")

    def rollout(self, kind: str, data: dict[str, Any], target: Target) -> None:
        """A rollout's start, end or rollback as one message (waves and the failure before a rollback: none)."""
        self.send(lambda: notify.rollout_message(kind, data, target.loaded.state.cluster.name, target.subject))


def step_fields(line: str) -> dict[str, str]:
    """Split an applier line `node: what` into log fields."""
    node, sep, what = line.partition(": ")
    if sep and " " not in node:
        return {"node": node, "step": what}
    return {"step": line}


def new_run_id() -> str:
    """A fresh run id (the runs table's key, bound to every log line of the run)."""
    return uuid.uuid4().hex[:12]
