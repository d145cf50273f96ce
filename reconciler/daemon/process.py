"""The daemon process: state-dir lock, signals (TERM/INT stop, HUP reload), metrics server, the wait loop."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO, Any

import structlog

from reconciler.daemon import logs, watched
from reconciler.daemon.config import DaemonConfig, load_config
from reconciler.daemon.leadership import make_ha
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.notify import Notifier, NotifyConfigError
from reconciler.daemon.sessions import Sessions
from reconciler.daemon.store import Store, recover_if_corrupt
from reconciler.desired.loader import DesiredStateError

STOP_DEADLINE = 25.0  # SIGTERM: the run in flight gets this long to finish its node operation, then we exit
REAP_EVERY = 30.0  # seconds between looks for idle SSH connections (at most this late past ssh_idle_timeout)


class LockedError(RuntimeError):
    """Another daemon holds the state directory."""


def acquire_lock(state_dir: Path) -> IO[str]:
    """Take the state directory's exclusive lock (one daemon per state directory) or raise LockedError."""
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = open(state_dir / "lock", "a+")  # noqa: SIM115 - held for the life of the process
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise LockedError(f"{state_dir} is locked by another reconciler (pid {holder})") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


CHANGES = ("created", "deleted", "modified", "moved", "closed")  # watchdog event types that change content


class Watcher:
    """Local mode: watchdog events on the desired-state directory, debounced.

    Any file of it counts (a `source:`, an .age secret, not only YAML), except what watched.ignored() names."""

    def __init__(self, directory: Path, wake: threading.Event, exclude: tuple[Path, ...] = ()) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        self.changed_at: float | None = None
        watcher = self
        directory = directory.resolve()

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                # Reads (the daemon's own included) open files, and a directory's "modified" only echoes a
                # child's event: neither changes the state.
                if event.event_type not in CHANGES or event.is_directory and event.event_type == "modified":
                    return
                # An atomic save renames a scratch file over the real one: the destination is what changed.
                paths = [event.src_path, getattr(event, "dest_path", "")]
                if all(not p or watched.ignored(directory, os.fsdecode(p), exclude) for p in paths):
                    return
                watcher.changed_at = time.monotonic()
                wake.set()

        self.observer = Observer()
        self.observer.schedule(Handler(), str(directory), recursive=True)
        self.observer.daemon = True
        self.observer.start()

    def quiet_for(self) -> float | None:
        """Seconds since the last change, or None when nothing changed since the last reconcile."""
        return None if self.changed_at is None else time.monotonic() - self.changed_at

    def consume(self) -> None:
        """Forget the pending change (it is being reconciled)."""
        self.changed_at = None

    def stop(self) -> None:
        """Stop watching."""
        self.observer.stop()


class Daemon:
    """`reconciler run`: one reconciler per state directory until SIGTERM."""

    def __init__(self, config: DaemonConfig, config_path: Path | None = None) -> None:
        self.config, self.config_path = config, config_path
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.reload = False
        self.log = structlog.get_logger("reconciler")

    def _on_term(self, signum: int, _: FrameType | None) -> None:
        if self.stop.is_set():
            return
        self.stop.set()
        self.wake.set()
        # Writes are atomic (temp file + rename), so a forced exit never leaves a partial file; the run in
        # flight gets STOP_DEADLINE seconds to finish its node operation cleanly.
        timer = threading.Timer(STOP_DEADLINE, lambda: os._exit(0))
        timer.daemon = True
        timer.start()

    def _on_hup(self, signum: int, _: FrameType | None) -> None:
        self.reload = True
        self.wake.set()

    def _reload(self, reconciler: Reconciler) -> None:
        self.reload = False
        if self.config_path is None:
            self.log.info("config.reload_skipped", reason="no config file (command-line mode)")
            return
        try:
            new = load_config(self.config_path)
        except DesiredStateError as exc:
            self.log.error("config.reload_failed", errors=[str(e) for e in exc.errors], keeping="old config")
            return
        if new.state_dir != self.config.state_dir:
            self.log.error("config.reload_failed", errors=["state_dir cannot change without a restart"])
            return
        if new.ha != self.config.ha:
            self.log.error("config.reload_failed", errors=["ha cannot change without a restart (the lease and the "
                                                           "fence go with the process)"])
            return
        if new.cluster != self.config.cluster:
            self.log.error("config.reload_failed", errors=["cluster cannot change without a restart (the state "
                                                           "database belongs to one cluster)"])
            return
        try:
            notifier = Notifier(new.notifications, self.config_path.parent) if new.notifications else None
        except NotifyConfigError as exc:
            self.log.error("config.reload_failed", errors=[str(exc)], keeping="old config")
            return
        self.config = new
        reconciler.reload(new, notifier)
        self.log.info("config.reloaded", mode=new.mode, poll_interval=new.poll_interval)

    def run(self) -> int:
        """Run until stopped; return the exit status."""
        try:
            lock = acquire_lock(self.config.state_path)
        except LockedError as exc:
            self.log.error("daemon.locked", error=str(exc))
            return 3
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGHUP, self._on_hup)
        try:
            recovered = recover_if_corrupt(self.config.state_path / "state.db")
            store = Store(self.config.state_path / "state.db")
        except (sqlite3.Error, OSError) as exc:
            self.log.error("state.unusable", error=f"{type(exc).__name__}: {exc}", state_dir=self.config.state_dir,
                           hint="free space or fix permissions in the state directory; nothing was applied")
            lock.close()
            return 4
        if recovered:
            # The applied commit, drift, rolled-back marks and any rollout journal are gone with it: the daemon
            # plans the branch head again (through the rollout's waves and gates) and says so everywhere.
            self.log.error("state.corrupt_recovered", detail=recovered)
            store.set("state_recovered", {"detail": recovered, "at": time.time()})
        interrupted = store.close_interrupted_runs()
        metrics = Metrics()
        server: Any = None
        if self.config.metrics_listen:
            server = metrics.serve(self.config.metrics_listen, self._status_page if self.config.status_page else None,
                                   self._runs_json, self._upgrade,
                                   self._promotion_json if self.config.cluster else None)
        config_dir = self.config_path.parent if self.config_path else Path.cwd()
        reconciler = Reconciler(self.config, store, metrics, self.stop, config_dir=config_dir,
                                sessions=Sessions(float(self.config.seconds("ssh_idle_timeout"))))
        reconciler.role.ha = make_ha(reconciler, self.wake)
        background = reconciler.start_workers()
        self.log.info("daemon.start", pid=os.getpid(), mode=self.config.mode, state_dir=self.config.state_dir,
                      source=self._source_text(), interrupted_runs=interrupted, metrics=self.config.metrics_listen)
        watcher = Watcher(Path(self.config.watch), self.wake, (self.config.state_path.resolve(),)) \
            if self.config.watch else None
        try:
            self._loop(reconciler, watcher)
        finally:
            self.stop.set()
            if not background.stop():
                self.log.warning("daemon.workers_still_running", reason="did not end in time; exiting anyway")
            if reconciler.ha is not None:
                reconciler.ha.release()  # the standby takes over at its next renewal instead of after expiry
            reconciler.sessions.close()
            if reconciler.notices.notifier is not None:
                reconciler.notices.notifier.close(timeout=5.0)  # the last cycle's queue (a dead target: 5 s at most)
            if watcher:
                watcher.stop()
            if server is not None:
                server.shutdown()
            store.close()
            lock.close()
        self.log.info("daemon.stop")
        return 0

    def _status_page(self) -> str:
        """The HTML of `/`, read from the state database at each request (its own read-only connection)."""
        from reconciler.daemon.peers import peer_runs
        from reconciler.daemon.status_page import MAX_RUNS, load_snapshot, render

        snapshot = load_snapshot(self.config.state_path / "state.db", self.config.mode, self._source_text())
        if self.config.ha is not None:
            snapshot.daemon = self._daemon_name()
            snapshot.peer_runs, snapshot.peer_errors = peer_runs(self.config.ha.peers, MAX_RUNS)
        return render(snapshot)

    def _upgrade(self) -> dict[str, Any] | None:
        """The upgrade's journal record for reconciler_node_upgrade_state, read at each scrape."""
        from reconciler.daemon.upgrade_view import load

        return load(self.config.state_path / "state.db")

    def _daemon_name(self) -> str:
        from reconciler.ha.role import default_name

        return (self.config.ha.name if self.config.ha else None) or default_name()

    def _runs_json(self, limit: int) -> str:
        """/runs.json: this daemon's runs for its peer's history and page."""
        from reconciler.daemon.peers import runs_json

        return runs_json(self.config.state_path / "state.db", self._daemon_name(), limit)

    def _promotion_json(self) -> str:
        """/promotion.json: what this cluster applied, rolled back and how healthy it is, for the next cluster."""
        from reconciler.daemon.promotion_http import answer_json

        return answer_json(self.config.state_path / "state.db", self.config.cluster)

    def _source_text(self) -> str:
        if self.config.repository:
            repo = self.config.repository
            return f"{logs.redact_url_credentials(repo.url)}#{repo.branch}" + (f":{repo.subdir}" if repo.subdir else "")
        return f"watch {self.config.watch}"

    def _loop(self, reconciler: Reconciler, watcher: Watcher | None) -> None:
        first = True
        next_poll = 0.0
        while not self.stop.is_set():
            if self.reload:
                self._reload(reconciler)
            now = time.monotonic()
            trigger = None
            if first:
                trigger = "start"
            elif watcher is not None:
                quiet = watcher.quiet_for()
                if quiet is not None and quiet >= self.config.debounce:
                    trigger = "watch"
            elif now >= next_poll:
                trigger = "poll"
            if trigger is None and reconciler.due(time.monotonic()):
                trigger = "drift-check"
            if trigger is None and reconciler.takeover_due():
                trigger = "takeover"
            if reconciler.sessions.reap():
                reconciler.log.debug("ssh.idle_closed")
            if trigger is not None:
                if watcher is not None and trigger in ("watch", "start"):
                    watcher.consume()
                if self.config.repository:
                    next_poll = time.monotonic() + self.config.seconds("poll_interval")
                try:
                    reconciler.cycle(trigger, force=first)
                except (sqlite3.Error, OSError) as exc:  # e.g. the state directory's file system is full
                    reconciler.log.error("state.write_failed", error=f"{type(exc).__name__}: {exc}",
                                         state_dir=self.config.state_dir,
                                         hint="nothing more is applied until the state database can be written")
                    next_poll = time.monotonic() + self.config.seconds("poll_interval")
                except Exception as exc:  # noqa: BLE001 - e.g. the Git checkout in a full state directory
                    reconciler.log.exception("cycle.error", error=f"{type(exc).__name__}: {str(exc)[:500]}",
                                             hint="nothing was applied this cycle; the next poll tries again")
                    next_poll = time.monotonic() + self.config.seconds("poll_interval")
                first = False
            if self.stop.is_set():
                break
            self.wake.clear()
            self.wake.wait(self._sleep_for(reconciler, watcher, next_poll))

    def _sleep_for(self, reconciler: Reconciler, watcher: Watcher | None, next_poll: float) -> float:
        waits = [reconciler.next_wake(time.monotonic()), REAP_EVERY]
        if self.config.repository:
            waits.append(next_poll - time.monotonic())
        if watcher is not None:
            quiet = watcher.quiet_for()
            if quiet is not None:
                waits.append(self.config.debounce - quiet)
        return max(0.05, min(waits))


def run_daemon(config: DaemonConfig, config_path: Path | None) -> int:
    """Configure logging and run the daemon."""
    logs.configure(config.log_format)
    return Daemon(config, config_path).run()
