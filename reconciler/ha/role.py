"""This daemon's role in a pair: the leader (holds the lease, acts) or a standby (plans and reports, never acts).

A thread renews the lease every `renew_interval` (a standby asks for it just as often, and gets it once it
expired). The leader believes it leads until `lease_duration` (less a margin) after it *sent* its last successful
renewal, measured on its own monotonic clock: the lease node starts its own count later, so the leader always
gives up first. What this belief cannot cover (a process paused after checking it, a request on the wire when
the lease ends) the nodes' fencing covers (reconciler/engine/fence.py).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import structlog

from reconciler.desired.inventory import NodeSpec
from reconciler.ha.lease import LeaseError, LeaseStore, LeaseView
from reconciler.transport.base import Transport

HA_KEY = "ha"  # state-database key: this daemon's role as `reconciler status` shows it
Connect = Callable[[], AbstractContextManager[tuple[Transport, NodeSpec] | None]]


class Operator(Protocol):
    """The operator commands a renewal carries (daemon/operator.py, over this daemon's state database)."""

    def outbox(self) -> list[dict[str, Any]]:
        """Commands given at this login node, for the leader."""

    def carried(self, sent: list[dict[str, Any]]) -> None:
        """SENT is on the lease node now."""

    def take(self, requests: list[dict[str, Any]]) -> None:
        """The holder takes REQUESTS from the lease node."""


class HighAvailability:
    """Lease renewal, role, fence and crash journal of one daemon of a pair."""

    def __init__(self, name: str, lease_node: str | None, lease_dir: str, duration: float, renew_every: float,
                 connect: Connect, *, address: str | None = None, on_change: Callable[[], None] = lambda: None,
                 publish: Callable[[dict[str, Any]], None] = lambda _: None, fence_dir: str | None = None,
                 operator: Operator | None = None) -> None:
        self.name, self.lease_node, self.duration, self.renew_every = name, lease_node, duration, renew_every
        self.address, self.fence_dir = address, fence_dir  # fence_dir: where nodes keep epochs (None: default)
        self.store = LeaseStore(lease_dir, timeout=max(2.0, renew_every))
        self.connect, self.on_change, self.publish = connect, on_change, publish
        self.operator = operator  # carries operator commands to the lease node; the leader takes them there
        self.margin = min(1.0, duration / 10)
        self.log = structlog.get_logger("reconciler")
        self._lock = threading.RLock()
        self.epoch: int | None = None  # the term this daemon holds (None: standby)
        self.valid_until = 0.0  # time.monotonic() until which it may act
        self.view: LeaseView | None = None
        self.error: str | None = None
        self.stepped_down: str | None = None  # why it last stopped leading
        self.ticked = False
        self.floor = 0  # the next term's lowest epoch: above any a node told us it has seen
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ the lease

    def tick(self) -> None:
        """Renew (leader) or try to take (standby) the lease once."""
        with self.connect() as pair:
            if pair is None:
                return  # no desired state loaded yet: the lease node is not known
            transport, node = pair
            sent = time.monotonic()
            outbox = self.operator.outbox() if self.operator else []
            try:
                view = self.store.call(transport, node, {"op": "acquire", "holder": self.name, "epoch": self.epoch,
                                                         "duration": self.duration, "address": self.address,
                                                         "floor": self.floor, "requests": outbox})
            except LeaseError as exc:
                self._failed(str(exc))
                return
        if self.operator:  # on the lease node now; the holder's requests are its own to take
            self.operator.carried(outbox)
            if view.operator:
                self.operator.take(view.operator)
        changed = False
        with self._lock:
            self.ticked, self.error, self.view = True, None, view
            if view.granted and view.holder == self.name:
                if self.epoch != view.epoch:
                    self.epoch, changed = view.epoch, True
                    self.stepped_down = None
                    self.log.warning("ha.leader", epoch=view.epoch, lease_node=node.name)
                self.valid_until = sent + self.duration - self.margin
            elif self.epoch is not None:
                self._step_down(f"the lease is {view.holder}'s now (epoch {view.epoch})")
                changed = True
        self._publish()
        if changed:
            self.on_change()

    def _failed(self, error: str) -> None:
        with self._lock:
            self.ticked, self.error = True, error
            expired = self.epoch is not None and not self._leading()
            if expired:
                self._step_down(f"lease not renewed in time: {error}")
        self.log.warning("ha.lease_failed", error=error, leader=self.epoch is not None)
        self._publish()
        if expired:
            self.on_change()

    def _step_down(self, reason: str) -> None:
        if self.epoch is None:
            return
        self.log.warning("ha.standby", reason=reason, epoch=self.epoch)
        self.epoch, self.valid_until, self.stepped_down = None, 0.0, reason

    def step_down(self, reason: str) -> None:
        """Stop leading now (the term is left to expire; a later one may be ours again)."""
        with self._lock:
            self._step_down(reason)
        self._publish()

    def fenced(self, detail: str) -> None:
        """A node refused our epoch: a successor has acted there. Stop acting at once.

        The refusal names the epoch the node has seen; the next term starts above it, so a lease store that was
        lost and started over at epoch 1 (a reinstalled controller) heals itself instead of being refused forever.
        """
        seen = re.search(r"older than epoch (\d+) of ", detail)
        with self._lock:
            if seen:
                self.floor = max(self.floor, int(seen.group(1)) + 1)
            self._step_down(f"fenced: {detail}")
        self._publish()
        self.on_change()

    def _leading(self) -> bool:
        """Holds a term whose lease has not run out on our clock (the caller holds the lock)."""
        return self.epoch is not None and time.monotonic() < self.valid_until

    def is_leader(self) -> bool:
        """Whether this daemon may act now (holds a term and its lease has not run out on our clock)."""
        with self._lock:
            return self._leading()

    def fence(self) -> dict[str, Any] | None:
        """The fencing token every command carries (None: not the leader, send nothing)."""
        with self._lock:
            if not self._leading():
                return None
            token: dict[str, Any] = {"epoch": self.epoch, "holder": self.name}
            return {**token, "dir": self.fence_dir} if self.fence_dir else token

    def release(self) -> None:
        """Give the lease up (clean shutdown): the standby takes over at its next renewal, not after expiry."""
        with self._lock:
            epoch = self.epoch
            self._step_down("shutting down")
        if epoch is None:
            return
        with contextlib.suppress(LeaseError), self.connect() as pair:
            if pair is not None:
                self.store.call(pair[0], pair[1], {"op": "release", "holder": self.name, "epoch": epoch})
                self.log.info("ha.released", epoch=epoch)
        self._publish()

    # ------------------------------------------------------------ the crash journal (beside the lease)

    def save(self, entries: dict[str, Any]) -> None:
        """Write crash-journal entries on the lease node (LeaseError unless we hold the current term)."""
        epoch = self.epoch
        if epoch is None:
            raise LeaseError("not the leader: the crash journal is not ours to write")
        with self.connect() as pair:
            if pair is None:
                raise LeaseError("no desired state loaded: the lease node is not known")
            self.store.call(pair[0], pair[1], {"op": "save", "holder": self.name, "epoch": epoch,
                                               "entries": entries})

    def journal(self) -> dict[str, Any]:
        """The crash journal as the previous leader left it."""
        with self.connect() as pair:
            if pair is None:
                raise LeaseError("no desired state loaded: the lease node is not known")
            view = self.store.call(pair[0], pair[1], {"op": "load"})
        return view.journal or {}

    # ------------------------------------------------------------ the thread

    def start(self, stop: threading.Event) -> None:
        """Renew every renew_interval until STOP."""
        def loop() -> None:
            while not stop.wait(self.renew_every):
                try:
                    self.tick()
                except Exception as exc:  # noqa: BLE001 - the renewer must outlive any one failure
                    self._failed(f"{type(exc).__name__}: {exc}")

        self._thread = threading.Thread(target=loop, name="ha-lease", daemon=True)
        self._thread.start()

    @property
    def started(self) -> bool:
        """Whether the renewal thread runs."""
        return self._thread is not None

    def snapshot(self) -> dict[str, Any]:
        """The role as status, page and metrics show it."""
        with self._lock:
            view = self.view
            return {"name": self.name, "role": "leader" if self._leading() else "standby", "epoch": self.epoch,
                    "leader": view.holder if view else None, "leader_address": view.address if view else None,
                    "lease_epoch": view.epoch if view else None, "expires_in": round(view.expires_in, 1) if view
                    else None, "lease_node": self.lease_node, "error": self.error, "stepped_down": self.stepped_down,
                    "at": time.time()}

    def _publish(self) -> None:
        try:
            self.publish(self.snapshot())
        except Exception as exc:  # noqa: BLE001 - status is best effort; the lease is what matters
            self.log.warning("ha.publish_failed", error=f"{type(exc).__name__}: {exc}")


def default_name() -> str:
    """This login node's short host name."""
    import socket

    return socket.gethostname().split(".")[0]

