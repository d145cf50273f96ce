"""Why an SSH connection failed: the transport's errors and the one-line reason naming the node and the cause."""

from __future__ import annotations

from typing import Any

import fabric
import paramiko
from paramiko.ssh_exception import NoValidConnectionsError

from reconciler.transport.hostkeys import HostKeyCheck, HostKeyRefused, refusal


class ConnectError(Exception):
    """A node could not be reached: the message says why (network, auth, host key, timeout)."""


class NoBanner(ConnectError):
    """The server hung up or stayed silent before its SSH banner: an overloaded sshd (MaxStartups, a late banner);
    nothing was sent, so trying once more is safe for any command."""


class ConnectionLost(ConnectError):
    """The connection dropped while a command ran: whether the command took effect is unknown."""


def explain(cxn: fabric.Connection, exc: Exception, connect_timeout: float) -> str:
    """A one-line reason why connecting failed, naming the host and the cause."""
    if isinstance(exc, HostKeyRefused | ConnectError):
        return str(exc)
    if isinstance(exc, paramiko.BadHostKeyException):
        check = _check_for(cxn, exc.hostname)
        return str(refusal(exc, check)) if check else f"HOST KEY CHANGED for {exc.hostname}: refusing"
    if isinstance(exc, paramiko.SSHException) and "no acceptable host key" in str(exc):
        check = _check_for(cxn, cxn.host)  # only key types known for the host were offered (see sshbuild.py)
        if check and check.known.lookup(check.name):
            return check.no_common_type_message()
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed for {cxn.user}@{where(cxn)}: {reason(exc)}"
    if isinstance(exc, TimeoutError):
        return f"connect to {where(cxn)} timed out after {connect_timeout:g}s"
    if isinstance(exc, paramiko.SSHException) and not _banner_seen(cxn):
        if isinstance(exc, paramiko.ProxyCommandFailure):  # its command ended: the far end hung up, no timeout
            return f"connect to {where(cxn)}: the connection was closed before the SSH banner ({reason(exc)})"
        if isinstance(exc.__context__, EOFError | ConnectionError):  # the peer hung up (FIN or RST): no timeout
            return f"connect to {where(cxn)}: the connection was closed before the SSH banner"
        detail = "" if str(exc) == "No existing session" else f" ({reason(exc)})"
        return f"connect to {where(cxn)}: no SSH banner within {connect_timeout:g}s{detail}"
    if isinstance(exc, NoValidConnectionsError):
        reasons = sorted({getattr(err, "strerror", None) or str(err) for err in exc.errors.values()})
        return f"cannot connect to {where(cxn)}: {'; '.join(reasons)}"
    return f"cannot connect to {where(cxn)}: {reason(exc)}"


def before_banner(cxn: fabric.Connection, exc: Exception) -> bool:
    """EXC ended the connection to the node itself before its SSH banner (not a bastion's, not a refused or
    unroutable address)."""
    return (isinstance(exc, paramiko.SSHException) and not isinstance(exc, paramiko.ProxyCommandFailure)
            and not _banner_seen(cxn))


def _banner_seen(cxn: fabric.Connection) -> bool:
    """Whether the server said hello (sent its SSH version line) before things went wrong."""
    transport = cxn.client.get_transport()
    return transport is None or bool(transport.remote_version)


def _check_for(cxn: Any, host: str) -> HostKeyCheck | None:
    """The host key check of the hop (the node or one of its bastions) whose host is `host`."""
    hop = cxn
    while isinstance(hop, fabric.Connection):
        if hop.host == host:
            return getattr(hop, "host_key_check", None)
        hop = hop.gateway
    return None


def where(cxn: fabric.Connection) -> str:
    """`host:port`, plus the bastion or proxy command it goes through."""
    via = ""
    if isinstance(cxn.gateway, fabric.Connection):
        via = f" via {cxn.gateway.host}:{cxn.gateway.port}"
    elif isinstance(cxn.gateway, str):
        via = f" via ProxyCommand {cxn.gateway!r}"
    return f"{cxn.host}:{cxn.port}{via}"


def reason(exc: BaseException) -> str:
    """An exception as `Type: message` (message alone when the type says nothing more)."""
    if isinstance(exc, paramiko.ChannelException):
        return exc.text
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, paramiko.SSHException) else f"{type(exc).__name__}: {text}"
