"""A command cut off at its timeout or at the output bound is ended on the node, and its sshd session freed (issue 43,
item 11): against a real OpenSSH sshd on 127.0.0.1 with `MaxSessions 2`, so a session still held shows as the next
command's channel refused. The node is this machine: its processes are looked for with pgrep."""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.transport import session
from reconciler.transport.bounds import BoundedOutput
from tests.transport.sshd_server import SSHD, Sshd
from tests.transport.test_ssh_transport import make_transport, spec

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")


@pytest.fixture
def key(client_key: tuple[Path, str]) -> Path:
    return client_key[0]


def left(pattern: str, within: float = 10.0) -> list[str]:
    """The processes whose command line matches PATTERN once they are gone or WITHIN seconds passed (pgrep)."""
    deadline = time.monotonic() + within
    while True:
        found = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout.splitlines()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def sleeper() -> str:
    """A `sleep` no other process on this machine runs: a long duration with random decimals."""
    return f"sleep 600.{random.randrange(10**6):06d}"


def test_commands_cut_off_at_their_timeout_are_ended_and_free_their_sessions(
        tmp_path: Path, sshd_factory: Callable[..., Sshd], key: Path) -> None:
    """Three commands past their timeout on one connection of a MaxSessions 2 server: each one's processes are gone
    after it, and a fourth command still gets a session on the same connection (no reconnect)."""
    sshd = sshd_factory("MaxSessions 2")
    with make_transport(tmp_path, [sshd]) as transport:
        node = spec("gpu01", sshd.port, key)
        for _ in range(3):
            command = sleeper()
            # 3 s, not 1: the login shell here (root's .bashrc on the test machine) may take over a second to
            # print "started" under load, as in test_command_timeout_is_an_error_not_a_hang
            result = transport.run(node, f"echo started; {command}; echo never", timeout=3)
            assert result.error == "command timed out after 3s" and result.stdout == "started\n", result
            assert left(command) == []
        after = transport.run(node, "echo fine", timeout=10)
        assert after.ok and after.stdout == "fine\n", after
        assert transport.connects["gpu01"] == 1


def test_a_command_cut_off_at_the_output_bound_is_ended(tmp_path: Path, sshd_factory: Callable[..., Sshd],
                                                        key: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the output bound (4 KiB here instead of 64 MiB) the command, still running, is ended on the node; the
    next commands on the connection get sessions."""
    monkeypatch.setattr(session, "BoundedOutput", lambda: BoundedOutput(limit=4096))
    sshd = sshd_factory("MaxSessions 2")
    with make_transport(tmp_path, [sshd]) as transport:
        node = spec("gpu01", sshd.port, key)
        for _ in range(3):
            command = sleeper()
            result = transport.run(node, f"head -c 100000 /dev/zero; {command}", timeout=30)
            assert result.error is not None and "answer larger than" in result.error, result
            assert left(command) == []
        after = transport.run(node, "echo fine", timeout=10)
        assert after.ok and after.stdout == "fine\n", after
        assert transport.connects["gpu01"] == 1
