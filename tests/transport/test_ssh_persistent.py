"""A long-lived SSHTransport (the daemon's persistent sessions) against real OpenSSH servers on 127.0.0.1:
reuse, a connection killed between commands, a retry only for idempotent commands, a changed host key on
reconnect, idle connections closed."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.transport.idempotent import for_idempotent
from reconciler.transport.ssh import SSHTransport
from tests.transport import sshd_server
from tests.transport.sshd_server import SSHD, Sshd
from tests.transport.test_ssh_transport import make_transport, spec

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")


def kill_connections(server: Sshd) -> None:
    """Reset every established TCP connection of the server (`ss -K`: both ends see the connection die)."""
    subprocess.run(["ss", "-K", "-tn", "state", "established", f"( sport = :{server.port} )"], check=True,
                   capture_output=True)


def established(server: Sshd) -> int:
    """Established TCP connections to the server's port."""
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{server.port} )"], check=True,
                         capture_output=True, text=True).stdout
    return len([line for line in out.splitlines() if line.strip()])


def test_commands_share_one_connection_and_a_killed_one_is_replaced(tmp_path: Path, sshd: Sshd,
                                                                    client_key: tuple[Path, str]) -> None:
    node = spec("gpu01", sshd.port, client_key[0])
    with make_transport(tmp_path, [sshd]) as transport:
        for _ in range(5):
            assert transport.run(node, "true").ok
        assert transport.total_connects() == 1 and established(sshd) == 1
        kill_connections(sshd)
        time.sleep(0.2)
        result = transport.run(node, "echo back")  # dead transport noticed before use: reconnect, then run
        assert result.ok and result.stdout == "back\n", result.describe()
        assert transport.total_connects() == 2 and established(sshd) == 1


LOSE_ONCE = ("if [ -e {mark} ]; then echo second; else touch {mark}; ss -K -tn state established "
             "'( sport = :{port} )' >/dev/null; sleep 5; fi")


def test_lost_connection_retried_only_for_idempotent_commands(tmp_path: Path, sshd: Sshd,
                                                              client_key: tuple[Path, str]) -> None:
    node = spec("gpu01", sshd.port, client_key[0])
    with make_transport(tmp_path, [sshd]) as transport:
        mark = tmp_path / "applied"
        result = transport.run(node, LOSE_ONCE.format(mark=mark, port=sshd.port))
        assert result.error and "lost during the command" in result.error and mark.exists()
        assert transport.run(node, "true").ok  # the next command reconnects
        mark.unlink()
        retried = for_idempotent(transport).run(node, LOSE_ONCE.format(mark=mark, port=sshd.port))
        assert retried.ok and retried.stdout == "second\n", retried.describe()
        assert transport.total_connects() == 3


def test_changed_host_key_on_reconnect_is_refused(tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  sshd_factory: Callable[..., Sshd]) -> None:
    node = spec("gpu01", sshd.port, client_key[0])
    with make_transport(tmp_path, [sshd]) as transport:
        assert transport.run(node, "true").ok
        sshd.stop()
        kill_connections(sshd)
        monkeypatch.setattr(sshd_server, "free_port", lambda: sshd.port)
        impostor = sshd_factory()  # same address and port, another host key
        assert impostor.port == sshd.port and impostor.host_key != sshd.host_key
        result = transport.run(node, "true")
        assert result.error and "HOST KEY CHANGED" in result.error, result.describe()
        transport.new_cycle()  # the next cycle tries again: still refused
        assert "HOST KEY CHANGED" in (transport.run(node, "true").error or "")


def test_idle_connections_are_closed(tmp_path: Path, sshd_factory: Callable[..., Sshd],
                                     client_key: tuple[Path, str]) -> None:
    a, b = sshd_factory(), sshd_factory()
    nodes = [spec("gpu01", a.port, client_key[0]), spec("gpu02", b.port, client_key[0])]
    transport: SSHTransport
    with make_transport(tmp_path, [a, b]) as transport:
        assert all(r.ok for r in transport.run_many(nodes, "true").values())
        time.sleep(2.5)  # gpu01 idle since: at least 2.5 s; gpu02 used again just below, idle well under 2 s even
        assert transport.run(nodes[1], "true").ok  # on a loaded machine (was 0.3/0.2 s: failed at load 9)
        assert transport.close_idle(2.0) == ["gpu01"]
        deadline = time.monotonic() + 5
        while established(a) and time.monotonic() < deadline:  # the server takes a moment to see the close
            time.sleep(0.05)
        assert transport.open_count() == 1 and established(a) == 0 and established(b) == 1
        assert transport.run(nodes[0], "true").ok and transport.total_connects() == 3


def test_many_connections_opened_at_once_all_work(tmp_path: Path, sshd_factory: Callable[..., Sshd],
                                                  client_key: tuple[Path, str]) -> None:
    """64 nodes connected in parallel by one transport (the first cycle of a big cluster): every connection works.
    (Each connection has its own fabric Config: one shared Config was seen half-merged on a 256-node light
    testbed, one node failing with "No attribute or config key found for 'forward_agent'"; this load does not
    reproduce that race reliably, it guards the parallel connect path as a whole.)

    The 64 "nodes" are one sshd on this machine: 64 sshd re-execs and key exchanges at once, and the first
    commands' login shells, all on two cores shared with the other test worker. With make_transport's 3 s connect
    timeout, CI saw 10 of the 64 get no SSH banner within 3 s, twice (the transport's one retry for a silent
    sshd). What this test checks is that every parallel connection works, not how fast one sshd answers 64, so
    its connect timeout is 60 s (the product's default is 10 s, against one sshd per node)."""
    server = sshd_factory("MaxStartups 200\nMaxSessions 200")
    nodes = [spec(f"gpu{i:03d}", server.port, client_key[0]) for i in range(64)]
    with make_transport(tmp_path, [server], forks=64, connect_timeout=60) as transport:
        results = transport.run_many(nodes, "echo ok")
        assert {name: r.describe() for name, r in results.items() if not (r.ok and r.stdout == "ok\n")} == {}
        assert transport.total_connects() == 64
