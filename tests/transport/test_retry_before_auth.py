"""A node whose ssh ends before authentication is tried once more, directly and behind a ClusterShell gateway
(issue 43 item 9: at 1,000 light nodes on 2 cores, 23-37 nodes lost a plan to "Connection timed out during banner
exchange" behind the gateways, and some the direct way to "Error reading SSH protocol banner").

Real OpenSSH on 127.0.0.1 (and the gateway `gw`); the nodes are names for loopback addresses where a small TCP relay
listens on the server's port: it holds its first connections open without a byte (no SSH banner, as an
overloaded sshd does) and relays the later ones to the real server. The gateway's OpenSSH gives up on a silent
one after ConnectTimeout with the words the real failure had.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ClusterShell")

from reconciler.desired.inventory import NodeSpec  # noqa: E402
from reconciler.model import ServiceManager, SSHDefaults  # noqa: E402
from reconciler.transport.base import CommandResult  # noqa: E402
from reconciler.transport.clush import ClushTransport, before_auth  # noqa: E402
from reconciler.transport.ssh import SSHTransport  # noqa: E402
from tests.transport.sshd_server import SSHD, Sshd  # noqa: E402

needs_sshd = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")


class SilentFirst:
    """A TCP relay on ADDRESS:PORT to 127.0.0.1:PORT whose first SILENT connections get no byte at all."""

    def __init__(self, address: str, port: int, silent: int) -> None:
        self.port, self.silent, self.accepted = port, silent, 0
        self.listener = socket.create_server((address, port))
        self.held: list[socket.socket] = []
        self.stopped = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.silent:
                self.held.append(conn)  # open and mute until the client gives up
                continue
            upstream = socket.create_connection(("127.0.0.1", self.port))
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        """Stop listening; drop the held connections."""
        self.stopped = True
        self.listener.close()
        for conn in self.held:
            conn.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def relays(sshd: Sshd) -> Iterator[dict[str, SilentFirst]]:
    """n1 (127.0.0.2): silent once, then relayed; n2 (127.0.0.3): always silent; n3 (127.0.0.4): never."""
    made = {"n1": SilentFirst("127.0.0.2", sshd.port, 1), "n2": SilentFirst("127.0.0.3", sshd.port, 10**6),
            "n3": SilentFirst("127.0.0.4", sshd.port, 0)}
    yield made
    for relay in made.values():
        relay.close()


@needs_sshd
def test_a_node_silent_before_authentication_is_tried_once_more(tmp_path: Path, sshd: Sshd,
                                                                 client_key: tuple[Path, str],
                                                                 relays: dict[str, SilentFirst]) -> None:
    """n1 answers on the second try, with the command run once; n2 never answers: reported, after two tries,
    with OpenSSH's words; n3 answers the first time and is not tried again."""
    if not Path("/usr/lib/python3/dist-packages/ClusterShell").is_dir():
        pytest.skip("the system python3 has no ClusterShell: apt-get install python3-clustershell (testbed deps)")
    (tmp_path / "ssh_config").write_text("Host gw\n  HostName 127.0.0.1\nHost n1\n  HostName 127.0.0.2\n"
                                         "Host n2\n  HostName 127.0.0.3\nHost n3\n  HostName 127.0.0.4\n")
    key = sshd.known_hosts_line.split(" ", 1)[1]
    (tmp_path / "known_hosts").write_text("".join(f"[127.0.0.{i}]:{sshd.port} {key}" for i in range(1, 5)))
    ssh = SSHDefaults.model_validate({
        "config": "ssh_config", "known_hosts": "known_hosts", "port": sshd.port, "connect_timeout": 3,
        "command_timeout": 30, "gateways": [{"name": "gw", "nodes": "n[1-3]"}]})
    nodes = [NodeSpec(name=name, host=name, port=sshd.port, user="root", identity_file=str(client_key[0]),
                      proxy_jump=None, roles=frozenset(), service_manager=ServiceManager(), drain=None)
             for name in ("n1", "n2", "n3")]
    marks = tmp_path / "runs"
    with ClushTransport(ssh, tmp_path) as transport:
        results = transport.run_many(nodes, lambda spec: f"echo {spec.name} >> {marks}; echo hello")
    n1, n2, n3 = results["n1"], results["n2"], results["n3"]
    assert (n1.exit_code, n1.stdout, n1.error) == (0, "hello\n", None), n1.describe()
    assert (n3.exit_code, n3.stdout, n3.error) == (0, "hello\n", None), n3.describe()
    assert n2.exit_code is None and n2.error is not None
    assert "banner exchange" in n2.stderr and "timed out" in n2.error and "twice" in n2.error, n2.describe()
    assert (relays["n1"].accepted, relays["n2"].accepted, relays["n3"].accepted) == (2, 2, 1)
    assert sorted(marks.read_text().split()) == ["n1", "n3"]  # each command ran once, n2's never


@needs_sshd
def test_the_direct_transport_connects_again_to_a_node_that_sent_no_banner(tmp_path: Path, sshd: Sshd,
                                                                            client_key: tuple[Path, str],
                                                                            relays: dict[str, SilentFirst]) -> None:
    """n1 (silent once) answers on the second connect, the command run once; n2 (always silent) is reported
    after two, with "(twice)"; n3 connects once."""
    key = sshd.known_hosts_line.split(" ", 1)[1]
    (tmp_path / "known_hosts").write_text("".join(f"[127.0.0.{i}]:{sshd.port} {key}" for i in range(1, 5)))
    ssh = SSHDefaults.model_validate({"known_hosts": "known_hosts", "connect_timeout": 2, "command_timeout": 20})
    nodes = [NodeSpec(name=name, host=f"127.0.0.{i}", port=sshd.port, user="root", identity_file=str(client_key[0]),
                      proxy_jump=None, roles=frozenset(), service_manager=ServiceManager(), drain=None)
             for i, name in ((2, "n1"), (3, "n2"), (4, "n3"))]
    marks = tmp_path / "runs"
    with SSHTransport(ssh, tmp_path) as transport:
        results = transport.run_many(nodes, lambda spec: f"echo {spec.name} >> {marks}; echo hello")
        connects = dict(transport.connects)
    assert (results["n1"].exit_code, results["n1"].stdout) == (0, "hello\n"), results["n1"].describe()
    assert (results["n3"].exit_code, results["n3"].stdout) == (0, "hello\n"), results["n3"].describe()
    n2 = results["n2"].error or ""
    assert n2.startswith(f"connect to 127.0.0.3:{sshd.port}: no SSH banner within 2s") and n2.endswith("(twice)"), n2
    assert (relays["n1"].accepted, relays["n2"].accepted, relays["n3"].accepted) == (2, 2, 1)
    assert connects == {"n1": 2, "n2": 2, "n3": 1}
    assert sorted(marks.read_text().split()) == ["n1", "n3"]


def result(stderr: str, error: str = "unreachable through gateway gw: x", code: int | None = None) -> CommandResult:
    return CommandResult("n1", code, "", stderr, 0.1, error=error)


@pytest.mark.parametrize("stderr", [
    "Connection timed out during banner exchange\nConnection to UNKNOWN port 65535 timed out\n",
    "kex_exchange_identification: read: Connection reset by peer\n",
    "kex_exchange_identification: Connection closed by remote host\nConnection closed by 10.0.0.5 port 22\n",
    "ssh: connect to host 10.0.0.5 port 22: Connection timed out\n",
])
def test_failures_before_authentication_are_retried(stderr: str) -> None:
    assert before_auth(result(stderr))


@pytest.mark.parametrize("res", [
    result("Connection to 10.0.0.5 closed by remote host.\n"),  # the session had started: the command may have run
    result("ssh: connect to host 10.0.0.5 port 22: Connection refused\n"),  # nothing listens: down, not busy
    result("root@10.0.0.5: Permission denied (publickey).\n"),
    result("Connection timed out during banner exchange\n", error="command timed out after 30s (through gw)"),
    result("Connection timed out during banner exchange\n", error=None, code=255),  # the command's own stderr
])
def test_other_failures_are_not_retried(res: CommandResult) -> None:
    assert not before_auth(res)
