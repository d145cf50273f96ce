"""The daemon's SSH sessions: one transport that outlives cycles, rebuilt when the inventory or SSH settings change.

- The loop leases the transport for a cycle (`lease(loaded, forks, cycle=True)`), the check worker for a check
  run; connections stay open between cycles (paramiko keepalives every 30 s), and each node keeps a fact agent
  running on its connection (`reconciler/transport/agent.py`): a steady-state drift check is one request line and
  one answer line per node, with no channel, shell or interpreter started.
- With `ssh.gateways`, the lease is a ClusterShell transport for the nodes behind gateways (one-shot fact
  gathering through the tree) over the persistent transport for the others.
- A dead connection is noticed before use and replaced (the host key is checked again, against the same
  known_hosts, re-read when edited); a node that failed to connect is tried again the next cycle.
- Connections unused for `ssh_idle_timeout` are closed by `reap`; with `ssh_idle_timeout: 0` every lease gets a
  fresh transport closed when the lease ends (the one-shot CLI's behaviour).
- When a new commit changes the inventory or the `ssh:` settings, the next lease builds a new transport; the old
  one is closed once its last lease ends. `close` closes everything (shutdown).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import LoadedState
from reconciler.transport.base import Transport
from reconciler.transport.ssh import SSHTransport


def settings_key(loaded: LoadedState, forks: int | None) -> str:
    """What a transport depends on: the `ssh:` settings, every node's address and login, the base dir, forks."""
    nodes = {name: {k: v for k, v in asdict(spec).items() if k not in ("roles", "drain", "entry")}
             for name, spec in sorted(node_specs(loaded.state).items())}
    blob = json.dumps({"ssh": loaded.state.ssh.model_dump(mode="json"), "nodes": nodes, "root": str(loaded.root),
                       "forks": forks}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class Sessions:
    """The transport shared by the loop and the workers, with lease counting so a rebuild never cuts a user off."""

    def __init__(self, idle_timeout: float) -> None:
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._key: str | None = None
        self._transport: SSHTransport | None = None
        self._users: dict[int, int] = {}
        self._retired: list[SSHTransport] = []
        self.connects_before = 0  # connects of transports already closed (for the total)

    @property
    def persistent(self) -> bool:
        """False when `ssh_idle_timeout` is 0: a fresh transport per lease."""
        return self.idle_timeout > 0

    @contextmanager
    def lease(self, loaded: LoadedState, forks: int | None, *, cycle: bool = False) -> Iterator[Transport]:
        """The transport for this desired state; CYCLE: a reconcile starts (retry nodes that failed before)."""
        transport = self._acquire(loaded, forks)
        if cycle and self.persistent:
            transport.new_cycle()
        try:
            if loaded.state.ssh.gateways:
                from reconciler.transport.clush import ClushTransport

                yield ClushTransport(loaded.state.ssh, Path(loaded.root), forks=forks, direct=transport)
            else:
                yield transport
        finally:
            self._release(transport)

    def _acquire(self, loaded: LoadedState, forks: int | None) -> SSHTransport:
        key = settings_key(loaded, forks)
        with self._lock:
            if not self.persistent:
                transport = SSHTransport(loaded.state.ssh, Path(loaded.root), forks=forks)
            else:
                if self._transport is None or key != self._key:
                    if self._transport is not None:
                        self._retired.append(self._transport)
                    self._transport = SSHTransport(loaded.state.ssh, Path(loaded.root), forks=forks, agents=True)
                    self._key = key
                transport = self._transport
            self._users[id(transport)] = self._users.get(id(transport), 0) + 1
            closing = self._collect()
        for old in closing:
            self._close(old)
        return transport

    def _release(self, transport: SSHTransport) -> None:
        with self._lock:
            self._users[id(transport)] -= 1
            if self._users[id(transport)] == 0:
                del self._users[id(transport)]
                if transport is not self._transport and transport not in self._retired:
                    self._retired.append(transport)  # a fresh, non-persistent one
            closing = self._collect()
        for old in closing:
            self._close(old)

    def _collect(self) -> list[SSHTransport]:
        """Retired transports nobody holds any more (caller holds the lock)."""
        done = [t for t in self._retired if id(t) not in self._users]
        self._retired = [t for t in self._retired if id(t) in self._users]
        return done

    def _close(self, transport: SSHTransport) -> None:
        self.connects_before += transport.total_connects()
        transport.close()

    def set_idle_timeout(self, seconds: float) -> None:
        """A reloaded config: 0 turns persistence off (the shared transport closes once its users are done)."""
        with self._lock:
            self.idle_timeout = seconds
            if seconds <= 0 and self._transport is not None:
                self._retired.append(self._transport)
                self._transport, self._key = None, None
            closing = self._collect()
        for old in closing:
            self._close(old)

    def reap(self) -> list[str]:
        """Close connections idle longer than the idle timeout; the nodes whose connection was closed."""
        with self._lock:
            transport = self._transport if self.persistent else None
        return transport.close_idle(self.idle_timeout) if transport is not None else []

    def total_connects(self) -> int:
        """SSH connections opened to nodes since start, over every transport."""
        with self._lock:
            current = [self._transport] if self._transport else []
            return self.connects_before + sum(t.total_connects() for t in current + self._retired)

    def close(self) -> None:
        """Close every transport (shutdown)."""
        with self._lock:
            transports = ([self._transport] if self._transport else []) + self._retired
            self._transport, self._key, self._retired = None, None, []
        for transport in transports:
            self._close(transport)
