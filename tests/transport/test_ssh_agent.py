"""Agents on a persistent SSHTransport (the daemon's fact agent) against real OpenSSH servers on 127.0.0.1:
started once and asked a line per cycle, restarted when killed or when the connection drops, a failed start
reported like a failed command, a timeout reported and the agent replaced, agents closed with their connection.

The generic tests use a small shell agent that answers with its PID (so "the same agent" is checkable); the
last test runs the real fact agent.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from reconciler.facts.gather import AGENT_COMMAND, FactRequest
from reconciler.transport.ssh import SSHTransport
from tests.transport.sshd_server import SSHD, Sshd
from tests.transport.test_ssh_persistent import established, kill_connections
from tests.transport.test_ssh_transport import make_transport, spec

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")

# Answers each line with its own PID; `sleep` makes it stall (for the timeout test).
ECHO_AGENT = 'while read -r line; do [ "$line" = sleep ] && sleep 30; echo "$$ $line"; done'


def agent_transport(tmp_path: Path, server: Sshd) -> SSHTransport:
    transport = make_transport(tmp_path, [server])
    transport.agents = True
    return transport


def ask_pid(transport: SSHTransport, node: object, line: str = "hello") -> int:
    result = transport.ask(node, ECHO_AGENT, line, timeout=5)  # type: ignore[arg-type]
    assert result.ok, result.describe()
    pid, echoed = result.stdout.split(" ", 1)
    assert echoed == line
    return int(pid)


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


def test_agent_started_once_and_asked_each_time(tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str]) -> None:
    node = spec("gpu01", sshd.port, client_key[0])
    with agent_transport(tmp_path, sshd) as transport:
        pids = {ask_pid(transport, node, f"q{i}") for i in range(5)}
        assert len(pids) == 1 and transport.agent_count() == 1
        assert transport.total_connects() == 1 and transport.round_trips["gpu01"] == 5
    assert gone(pids.pop()), "closing the transport must end the agent"


def test_killed_agent_and_dropped_connection_are_replaced(tmp_path: Path, sshd: Sshd,
                                                         client_key: tuple[Path, str]) -> None:
    node = spec("gpu01", sshd.port, client_key[0])
    with agent_transport(tmp_path, sshd) as transport:
        first = ask_pid(transport, node)
        os.kill(first, 9)
        assert gone(first)
        second = ask_pid(transport, node)  # the dead agent is noticed and a new one asked, no error
        assert second != first and transport.total_connects() == 1
        kill_connections(sshd)
        time.sleep(0.2)
        third = ask_pid(transport, node)
        assert third not in (first, second) and transport.total_connects() == 2 and established(sshd) == 1


def test_agent_that_cannot_start_is_a_failed_command(tmp_path: Path, sshd: Sshd,
                                                     client_key: tuple[Path, str]) -> None:
    node = spec("gpu01", sshd.port, client_key[0])
    with agent_transport(tmp_path, sshd) as transport:
        result = transport.ask(node, "exec no-such-python-here -c agent", "{}", timeout=5)
        assert result.error is None and result.exit_code == 127 and "not found" in result.stderr
        assert transport.round_trips["gpu01"] == 1  # not retried: it never answered


def test_timeout_reported_and_agent_replaced(tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str]) -> None:
    node = spec("gpu01", sshd.port, client_key[0])
    with agent_transport(tmp_path, sshd) as transport:
        first = ask_pid(transport, node)
        start = time.monotonic()
        stalled = transport.ask(node, ECHO_AGENT, "sleep", timeout=1)
        assert stalled.error == "command timed out after 1s" and time.monotonic() - start < 4
        assert ask_pid(transport, node) != first  # a fresh agent: the stalled one's answer can never be misread
        assert transport.agent_count() == 1


def test_idle_close_ends_the_agent(tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str]) -> None:
    node = spec("gpu01", sshd.port, client_key[0])
    with agent_transport(tmp_path, sshd) as transport:
        pid = ask_pid(transport, node)
        time.sleep(0.3)
        assert transport.close_idle(0.2) == ["gpu01"]
        assert gone(pid) and transport.agent_count() == 0
        assert ask_pid(transport, node) != pid


def test_fact_agent_answers_fresh_facts_per_line(tmp_path: Path, sshd: Sshd,
                                                 client_key: tuple[Path, str]) -> None:
    """The real fact agent over SSH: one process, each answer read from the node at that moment."""
    node = spec("gpu01", sshd.port, client_key[0])
    watched = tmp_path / "watched.conf"
    with agent_transport(tmp_path, sshd) as transport:
        answers = []
        for cycle in range(3):
            watched.write_text(f"cycle {cycle}\n")
            request = FactRequest(files=[str(watched)], commands={"pid": "echo $PPID"}).encode()
            result = transport.ask(node, AGENT_COMMAND, request, timeout=20)
            assert result.ok, result.describe()
            answers.append(json.loads(result.stdout))
        assert [a["files"][str(watched)]["content"] for a in answers] == ["cycle 0\n", "cycle 1\n", "cycle 2\n"]
        assert len({a["commands"]["pid"]["stdout"] for a in answers}) == 1  # the same agent spawned each
        assert transport.total_connects() == 1


def test_hostile_node_output_is_bounded(tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str]) -> None:
    """A node that sends endless output (a command's stdout, or an agent line with no end) is cut off at
    MAX_OUTPUT and reported; the daemon's memory does not follow the node (issue 22)."""
    from reconciler.transport.session import MAX_OUTPUT

    node = spec("gpu01", sshd.port, client_key[0])
    with agent_transport(tmp_path, sshd) as transport:
        result = transport.run(node, f"head -c {MAX_OUTPUT + 2**20} /dev/zero", timeout=60)
        assert not result.ok and "larger than 64 MiB" in (result.error or "")
        assert result.stdout == ""
        endless = transport.ask(node, "while read -r line; do cat /dev/zero; done", "x", timeout=60)
        assert not endless.ok and "larger than 64 MiB" in endless.describe()
        assert ask_pid(transport, node) > 0  # the node is asked again as usual afterwards
