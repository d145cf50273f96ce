"""One SSH connection: fabric's Connection and paramiko's transport and proxy adapted to many nodes at once."""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from typing import Any

import fabric
import paramiko

from reconciler.transport.hostkeys import HostKeyCheck, HostKeyRefused
from reconciler.transport.ssherrors import ConnectError, explain, reason, where

# paramiko's transport thread logs a failed handshake (an sshd killed, a peer hanging up before its banner) at
# ERROR with its traceback; with no handler configured, Python's last-resort handler printed that traceback on the
# CLI's and the daemon's stderr. The failure reaches the caller as a one-line reason naming the node (explain()).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class PollProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand, reading with poll(2) instead of select(2).

    select() cannot watch a descriptor numbered 1024 or more, so with a ProxyCommand per node a plan of a few
    hundred nodes (each connection kept open: a socket pair and pipes) failed with "filedescriptor out of range
    in select()"; poll() has no such limit.
    """

    @classmethod
    def adopt(cls, proxy: paramiko.ProxyCommand) -> PollProxyCommand:
        """The same running command, read with poll."""
        proxy.__class__ = cls
        return proxy  # type: ignore[return-value]

    def recv(self, size: int) -> bytes:
        """Read up to SIZE bytes of the command's stdout, within the timeout."""
        buffer = b""
        start = time.monotonic()
        stdout = self.process.stdout
        assert stdout is not None
        poller = select.poll()
        poller.register(stdout.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while len(buffer) < size:
                wait_ms = None
                if self.timeout is not None:
                    left = self.timeout - (time.monotonic() - start)
                    if left <= 0:
                        raise TimeoutError()
                    wait_ms = max(1, int(left * 1000))
                if poller.poll(wait_ms):
                    chunk = os.read(stdout.fileno(), size - len(buffer))
                    if not chunk:
                        break  # the command exited: what was read is all there is
                    buffer += chunk
            return buffer
        except TimeoutError:
            if buffer:
                return buffer
            raise
        except OSError as exc:
            raise paramiko.ProxyCommandFailure(" ".join(self.cmd), exc.strerror) from exc


class GcmFirstTransport(paramiko.Transport):
    """paramiko's Transport offering AES-GCM (AEAD) before its default AES-CTR + HMAC; every cipher is still offered.

    With a MAC cipher, paramiko compares every packet's MAC in a byte-by-byte Python loop
    (`util.constant_time_bytes_eq`): ~15% of a cold plan's client CPU. AES-GCM needs no MAC (OpenSSH has it since
    6.2; OpenSSH's own order puts it after chacha20-poly1305, which paramiko lacks).
    """

    _preferred_ciphers = tuple(c for c in paramiko.Transport._preferred_ciphers if "gcm" in c) + tuple(
        c for c in paramiko.Transport._preferred_ciphers if "gcm" not in c)


class NodeConnection(fabric.Connection):
    """A fabric Connection with a thread-safe `open` and a bastion channel honouring the connect timeout."""

    # real attributes: invoke's DataProxy would turn any other attribute set into a config key
    _open_lock: threading.Lock | None = None
    shared = False
    host_key_check: HostKeyCheck | None = None
    open_failure: Exception | None = None

    def __init__(self, *args: Any, shared: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open_lock = threading.Lock()
        self.shared = shared  # a bastion shared by many nodes: opened once, a failure remembered
        self.host_key_check = None
        self.open_failure = None

    def open(self) -> Any:
        """Open once, even when several threads share this connection (a bastion)."""
        assert self._open_lock is not None
        with self._open_lock:
            if self.open_failure is not None:
                raise self.open_failure
            try:
                return super().open()
            except Exception as exc:
                if self.shared:
                    self.open_failure = exc
                raise

    def open_gateway(self) -> Any:
        """Open the channel through the bastion with a timeout (fabric would wait up to an hour)."""
        if not isinstance(self.gateway, fabric.Connection):
            proxy = super().open_gateway()
            return PollProxyCommand.adopt(proxy) if isinstance(proxy, paramiko.ProxyCommand) else proxy
        try:
            self.gateway.open()
        except Exception as exc:
            why = explain(self.gateway, exc, self.connect_timeout)
            host_key = isinstance(exc, HostKeyRefused | paramiko.BadHostKeyException)
            raise ConnectError(why if host_key else f"via bastion: {why}") from exc
        try:
            return self.gateway.transport.open_channel(
                kind="direct-tcpip", dest_addr=(self.host, int(self.port)), src_addr=("", 0),
                timeout=self.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise ConnectError(f"cannot connect to {where(self)}: the bastion says: {reason(exc)}") from exc


def verify_chain(cxn: fabric.Connection) -> None:
    """After the handshakes: refuse if the node or a bastion presented a key marked `@revoked`."""
    hop: Any = cxn
    while isinstance(hop, fabric.Connection):
        check: HostKeyCheck | None = getattr(hop, "host_key_check", None)
        if check is not None and hop.transport is not None:
            check.verify(hop.transport.get_remote_server_key())
        hop = hop.gateway


def close_quietly(cxn: fabric.Connection) -> None:
    """Close a connection and the bastion hops only it uses (not a shared bastion), ignoring errors."""
    hop: Any = cxn
    while isinstance(hop, fabric.Connection) and not getattr(hop, "shared", False):
        try:
            hop.client.close()
            hop.transport = None
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        hop = hop.gateway
