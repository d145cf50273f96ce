"""What the reconcile loop remembers and shares: its target, what it remembers between cycles, and the view of the
loop that the pair role (leadership.py) and the background workers (workers.py) use, so that they need not import
the loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    """Which commits the loop has seen, validated and applied (the first three mirrored into the store)."""

    seen_head: str | None = None
    good: str | None = None
    applied: str | None = None
    applied_target: Target | None = None  # the applied commit's desired state, what a rollback returns to
    skipped: str | None = None  # a rolled-back commit already reported as skipped


class LoopHost(Protocol):
    """The loop as the pair role sees it (leadership.py): what a takeover reads and adopts."""

    store: Store
    metrics: Metrics
    state: LoopState
    sessions: Sessions
    ha_loaded: LoadedState | None  # the desired state the lease thread reaches the lease node with

    @property
    def config(self) -> DaemonConfig:
        """The daemon config in force."""
        ...


class CheckRunner(Protocol):
    """The loop's health checks as the check worker sees them (reconciler.daemon.loop_checks.HealthChecks)."""

    target: LoadedState | None  # what the check worker checks: the last reconciled state

    def due(self, store: Store | None = None) -> list[str]:
        """Health checks whose interval or schedule has come."""
        ...

    def run(self, transport: Transport, loaded: LoadedState, names: list[str] | None, why: str,
            store: Store, should_stop: Callable[[], bool]) -> None:
        """Run health checks over TRANSPORT; record, export, drain/resume as they decide."""
        ...


class PrReporter(Protocol):
    """The loop's PR reports as the PR worker sees them (reconciler.daemon.loop_prs.PrReports)."""

    def report(self, repo: Any, loaded: LoadedState, facts: ClusterFacts, store: Store, log: Any) -> None:
        """Plan every open pull request against these facts and keep one comment per PR current."""
        ...


class WorkerHost(LoopHost, Protocol):
    """The loop as the background workers see it (workers.py); reconciler.daemon.loop.Reconciler is one."""

    stop: Any
    source: GitSource | None

    @property
    def checks(self) -> CheckRunner:
        """The health checks of the last reconciled state."""
        ...

    @property
    def prs(self) -> PrReporter:
        """The PR reports."""
        ...

    @property
    def ha(self) -> HighAvailability | None:
        """This daemon's pair role (None: a single daemon)."""
        ...

    def acts(self) -> bool:
        """Whether this daemon may change the cluster."""
        ...
