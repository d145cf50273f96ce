"""Work that must never hold up the reconcile loop: health checks and pull-request reports, each in its own thread.

- The check worker runs the checks of the last reconciled desired state on their own schedule (and all of them
  after an apply, when `checks_after_apply`), over the daemon's shared SSH sessions, with its own SQLite
  connection. The PR worker renews pull-request comments every `forge.interval` from the facts of the last
  cycle that applied nothing, with its own SQLite connection and its own GitPython object.
- Applies and checks never overlap, and an apply never waits for a check: **an apply preempts checks** (`Gate`).
  When the loop is about to apply while a check runs, the check is told to stop (it asks between steps), its
  Slurm jobs are cancelled (`scancel --name=reconciler-nccl-CHECK`, repeated each second until the check has
  unwound), the check records nothing and acts on nothing (its reservation is deleted and the nodes a retest
  had resumed are drained again, by the runner's own clean-up), and the apply starts. The check runs again after
  the apply (all checks when `checks_after_apply`, else at once because nothing was recorded). No check starts
  while an apply runs. A check therefore never drains a node while an apply restarts slurmd there, and a long
  NCCL sweep delays a commit by the time its jobs take to cancel (about a second).
- SIGTERM: `stop` sets the same stop; the worker is joined for at most STOP_WAIT seconds (its srun jobs are
  cancelled the same way, so the reservation is gone before the process exits).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from reconciler.daemon.leadership import fenced
from reconciler.daemon.loop_state import WorkerHost
from reconciler.daemon.sessions import Sessions
from reconciler.daemon.store import Store
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import LoadedState
from reconciler.facts.models import ClusterFacts
from reconciler.model import parse_duration

if TYPE_CHECKING:
    from reconciler.transport.base import Transport

CHECK_POLL = 5.0  # seconds between looks at the health-check schedule (one SQLite query)
STOP_WAIT = 15.0  # SIGTERM: how long the workers get to unwind (cancel jobs, delete the reservation)
CANCEL_EVERY = 1.0  # seconds between scancel rounds while a preempted check unwinds


class Gate:
    """Applies and checks never overlap: an apply preempts a running check; no check starts during an apply."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._applying = False
        self._checking = False
        self.cancel = threading.Event()

    def enter_check(self) -> bool:
        """Start a check run unless an apply runs (False: try again after it)."""
        with self._cond:
            if self._applying:
                return False
            self._checking = True
            return True

    def leave_check(self) -> None:
        """A check run ended (finished or unwound after a cancel)."""
        with self._cond:
            self._checking = False
            self._cond.notify_all()

    @property
    def checking(self) -> bool:
        """Whether a check run is in flight."""
        with self._cond:
            return self._checking

    @contextmanager
    def applying(self, preempt: Callable[[], None], stop: threading.Event) -> Iterator[bool]:
        """Hold the cluster for an apply: cancel a running check (PREEMPT cancels its jobs) and wait until it unwound.

        Yields whether a check was preempted.
        """
        with self._cond:
            self._applying = True
            busy = self._checking
        try:
            if busy:
                self.cancel.set()
                while self.checking and not stop.is_set():
                    preempt()
                    with self._cond:
                        self._cond.wait_for(lambda: not self._checking, timeout=CANCEL_EVERY)
            yield busy
        finally:
            with self._cond:
                self._applying = False
                self.cancel.clear()
                self._cond.notify_all()


class CheckWorker(threading.Thread):
    """Runs due health checks (and the after-apply run) in the background."""

    def __init__(self, reconciler: WorkerHost, sessions: Sessions, gate: Gate, db: Path) -> None:
        super().__init__(name="checks", daemon=True)
        self.reconciler, self.sessions, self.gate, self.db = reconciler, sessions, gate, db
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._requested: tuple[list[str] | None, str] | None = None
        self._current: tuple[LoadedState, Transport] | None = None
        self.log = structlog.get_logger("reconciler")

    def request(self, names: list[str] | None, why: str) -> None:
        """Run these checks (None: all) as soon as possible."""
        with self._lock:
            if self._requested is not None and (self._requested[0] is None or names is None):
                names = None
            elif self._requested is not None and names is not None:
                names = sorted(set(self._requested[0] or []) | set(names))
            self._requested = (names, why)
        self.wake.set()

    def _take(self, store: Store) -> tuple[list[str] | None, str] | None:
        with self._lock:
            requested, self._requested = self._requested, None
        if requested is not None:
            return requested
        due = self.reconciler.checks.due(store)
        return (due, "schedule") if due else None

    def run(self) -> None:
        """The worker's loop: wake every CHECK_POLL seconds or on request; stop with the daemon."""
        store = Store(self.db)
        stop = self.reconciler.stop
        try:
            while not stop.is_set():
                self.wake.wait(CHECK_POLL)
                self.wake.clear()
                loaded = self.reconciler.checks.target
                if stop.is_set() or loaded is None or not (loaded.state.checks.node or loaded.state.checks.nccl):
                    continue
                if not self.reconciler.acts():
                    continue  # a standby: its leader checks and drains
                job = self._take(store)
                if job is None:
                    continue
                if not self.gate.enter_check():  # an apply runs: after it
                    self.request(*job)
                    time.sleep(0.2)
                    continue
                try:
                    with self.sessions.lease(loaded, self.reconciler.config.ssh.forks) as plain:
                        transport = fenced(self.reconciler.ha, plain)  # drains and resumes carry the epoch
                        self._current = (loaded, transport)
                        self.reconciler.checks.run(transport, loaded, job[0], job[1], store,
                                                   lambda: stop.is_set() or self.gate.cancel.is_set())
                except Exception as exc:  # noqa: BLE001 - a broken check must not kill the worker
                    self.log.exception("checks.error", error=f"{type(exc).__name__}: {exc}")
                finally:
                    self._current = None
                    self.gate.leave_check()
        finally:
            store.close()

    def cancel_jobs(self) -> None:
        """Cancel the Slurm jobs of the NCCL checks of the run in flight (a few ms: one command on the controller)."""
        from reconciler.checks.nccl.run import cancel_command

        current = self._current
        if current is None:
            return
        loaded, transport = current
        names = [c.name for c in loaded.state.checks.nccl if c.mode != "local"]
        if not names:
            return
        controller = node_specs(loaded.state)[loaded.state.cluster.controller_names[0]]
        result = transport.run(controller, cancel_command(names), timeout=10)
        if not result.ok:
            self.log.warning("checks.cancel_failed", error=result.describe())


class PrWorker(threading.Thread):
    """Renews pull-request comments every forge.interval from the facts of the last cycle that applied nothing."""

    def __init__(self, reconciler: WorkerHost, db: Path) -> None:
        super().__init__(name="prs", daemon=True)
        self.reconciler, self.db = reconciler, db
        self.wake = threading.Event()
        self._snapshot: tuple[LoadedState, ClusterFacts] | None = None
        self.log = structlog.get_logger("reconciler")

    def publish(self, loaded: LoadedState, facts: ClusterFacts) -> None:
        """The newest facts (and the desired state they were gathered for)."""
        self._snapshot = (loaded, facts)
        self.wake.set()

    def run(self) -> None:
        """Report when the interval has passed and there are facts; stop with the daemon."""
        import git

        reconciler = self.reconciler
        assert reconciler.source is not None
        store = Store(self.db)
        repo: Any = None
        last = 0.0
        try:
            while not reconciler.stop.is_set():
                forge = reconciler.config.forge
                interval = float(parse_duration(forge.interval)) if forge else 60.0
                self.wake.wait(max(0.1, min(60.0, last + interval - time.monotonic())))
                self.wake.clear()
                snapshot = self._snapshot
                if reconciler.stop.is_set() or forge is None or snapshot is None:
                    continue
                if time.monotonic() - last < interval or not reconciler.acts():
                    continue  # not due, or a standby (only the leader comments)
                last = time.monotonic()
                try:
                    repo = repo or git.Repo(reconciler.source.path)  # its own object: GitPython is not thread-safe
                    reconciler.prs.report(repo, snapshot[0], snapshot[1], store, self.log)
                except Exception as exc:  # noqa: BLE001 - a broken report must not kill the worker
                    self.log.exception("prs.error", error=f"{type(exc).__name__}: {exc}")
        finally:
            store.close()


class Background:
    """The daemon's workers; the loop tells them what happened, SIGTERM stops them."""

    def __init__(self, reconciler: WorkerHost, sessions: Sessions, gate: Gate, db: Path) -> None:
        self.checks = CheckWorker(reconciler, sessions, gate, db)
        self.prs = PrWorker(reconciler, db) if reconciler.source is not None else None

    def start(self) -> None:
        """Start the threads."""
        self.checks.start()
        if self.prs is not None:
            self.prs.start()

    def stop(self, deadline: float = STOP_WAIT) -> bool:
        """Wake the workers (the stop is set), cancel jobs in flight, wait up to DEADLINE; True if all ended."""
        until = time.monotonic() + deadline
        threads = [t for t in (self.checks, self.prs) if t is not None]
        for thread in threads:
            thread.wake.set()
        while self.checks.is_alive() and time.monotonic() < until:
            if self.checks.gate.checking:
                self.checks.cancel_jobs()
            self.checks.join(min(CANCEL_EVERY, max(0.0, until - time.monotonic())))
        for thread in threads:
            thread.join(max(0.0, until - time.monotonic()))
        return not any(t.is_alive() for t in threads)
