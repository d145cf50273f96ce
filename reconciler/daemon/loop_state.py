"""What the reconcile loop remembers and shares: its target, its state between cycles, and the view of it that the
pair role (leadership.py) and the background workers (workers.py) use, so that they need not import the loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.sessions import Sessions
from reconciler.daemon.store import Store
from reconciler.desired.loader import LoadedState
from reconciler.facts.models import ClusterFacts
from reconciler.ha.role import HighAvailability
from reconciler.transport.base import Transport


@dataclass
class Target:
    """What a cycle reconciles: a commit (or local content hash) and its loaded desired state."""

    commit: str
    subject: str | None
    loaded: LoadedState


@dataclass
class LoopState:
    """What the loop remembers between cycles (mirrored into the store)."""

    seen_head: str | None = None
    good: str | None = None
    applied: str | None = None
    last_reconcile: float | None = None  # time.monotonic() when the last run ended (None: none yet)
    failures: int = 0
    retry_at: float = 0.0  # time.monotonic() of the next retry (0: none)
    failed_commit: str | None = None
    ran_checks_for: set[str] = field(default_factory=set)
    skipped: str | None = None  # a rolled-back commit already reported as skipped


class LoopHost(Protocol):
    """The loop as the pair role sees it (leadership.py): what a takeover reads and adopts."""

    config: DaemonConfig
    store: Store
    metrics: Metrics
    state: LoopState
    sessions: Sessions
    ha_loaded: LoadedState | None  # the desired state the lease thread reaches the lease node with
    applied_target: Target | None


class WorkerHost(LoopHost, Protocol):
    """The loop as the background workers see it (workers.py); reconciler.daemon.loop.Reconciler is one."""

    stop: Any
    source: GitSource | None
    ha: HighAvailability | None
    check_target: LoadedState | None  # what the check worker checks: the last reconciled state

    def acts(self) -> bool:
        """Whether this daemon may change the cluster."""
        ...

    def due_checks(self, store: Store | None = None) -> list[str]:
        """Health checks whose interval or schedule has come."""
        ...

    def run_checks(self, transport: Transport, loaded: LoadedState, names: list[str] | None, why: str,
                   store: Store, should_stop: Callable[[], bool]) -> None:
        """Run health checks over TRANSPORT; record, export, drain/resume as they decide."""
        ...

    def report_prs(self, repo: Any, loaded: LoadedState, facts: ClusterFacts, store: Store, log: Any) -> None:
        """Plan every open pull request against these facts and keep one comment per PR current."""
        ...
