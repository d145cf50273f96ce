"""An open connection with nothing to read does not wake ten times a second (issue 32: cold plan CPU grew with N^2).

paramiko's reader thread waits 0.1 s for a packet, then looks at its state and waits again. With every node's
connection open for a whole plan (and the daemon's sessions all the time), those wake-ups cost nodes x seconds.
Once connected, the transport waits IDLE_WAKE_SECONDS; real OpenSSH, direct and through a ProxyCommand.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from reconciler.transport.ssh import IDLE_WAKE_SECONDS, SSHTransport
from tests.transport.sshd_server import SSHD, Sshd
from tests.transport.test_ssh_transport import make_transport, spec

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")

IDLE_S = 1.5  # the idle time watched: paramiko's 0.1 s wait wakes about 15 times in it


@pytest.fixture
def wakeups(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, int]]:
    """Count the reader threads' wake-ups with nothing read (paramiko checks the keepalive at each), per thread."""
    counts: dict[int, int] = {}
    lock = threading.Lock()
    real = paramiko.packet.Packetizer._check_keepalive

    def counted(self: paramiko.packet.Packetizer) -> None:
        with lock:
            counts[threading.get_ident()] = counts.get(threading.get_ident(), 0) + 1
        real(self)

    monkeypatch.setattr(paramiko.packet.Packetizer, "_check_keepalive", counted)
    yield counts


def _idle_wakeups(transport: SSHTransport, node_name: str, port: int, key: Path, counts: dict[int, int],
                  host: str = "127.0.0.1") -> int:
    """Run one command, then stay idle IDLE_S; the wake-ups of that connection's reader thread meanwhile."""
    node = spec(node_name, port, key, host=host)
    result = transport.run(node, "echo ok")
    assert result.ok and result.stdout == "ok\n", result.describe()
    reader = transport.connection(node).client.get_transport()
    sock = reader.sock
    assert (sock.timeout if isinstance(sock, paramiko.ProxyCommand) else sock.gettimeout()) == IDLE_WAKE_SECONDS
    before = counts.get(reader.ident, 0)
    time.sleep(IDLE_S)  # the idle period under test, not a synchronisation
    woke = counts.get(reader.ident, 0) - before
    again = transport.run(node, "echo still")  # the connection still works after the idle time
    assert again.ok and again.stdout == "still\n", again.describe()
    assert transport.total_connects() == 1
    return woke


def test_an_idle_connection_wakes_rarely(tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str],
                                         wakeups: dict[int, int]) -> None:
    with make_transport(tmp_path, [sshd]) as transport:
        woke = _idle_wakeups(transport, "gpu01", sshd.port, client_key[0], wakeups)
    assert woke <= IDLE_S / IDLE_WAKE_SECONDS + 1, f"{woke} wake-ups in {IDLE_S} s idle"


def test_an_idle_connection_through_a_proxycommand_wakes_rarely(tmp_path: Path, sshd: Sshd,
                                                                 client_key: tuple[Path, str],
                                                                 wakeups: dict[int, int]) -> None:
    """The testbed's way (ProxyCommand, read with poll(2)): the same wait, and the proxy is ended on close."""
    (tmp_path / "ssh_config").write_text(f"Host gpu*\n    HostName 127.0.0.1\n    Port {sshd.port}\n"
                                         "    ProxyCommand nc %h %p\n")
    transport = make_transport(tmp_path, [sshd], config="ssh_config")
    try:
        woke = _idle_wakeups(transport, "gpu01", 22, client_key[0], wakeups, host="gpu01")
        proxy = transport.connection(spec("gpu01", 22, client_key[0], host="gpu01")).client.get_transport().sock
        reader = transport.connection(spec("gpu01", 22, client_key[0], host="gpu01")).client.get_transport()
    finally:
        transport.close()
    assert woke <= IDLE_S / IDLE_WAKE_SECONDS + 1, f"{woke} wake-ups in {IDLE_S} s idle"
    deadline = time.monotonic() + 30
    while (reader.is_alive() or proxy.process.poll() is None) and time.monotonic() < deadline:
        time.sleep(0.05)  # closing kills the proxy: its reader sees the end at once, not after the idle wait
    assert not reader.is_alive() and proxy.process.poll() is not None
