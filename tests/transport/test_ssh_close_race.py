"""Closing a channel while its output still streams in (a node cut off at the output bound, or at its deadline)
must leave the connection up (issue 32 item 11), against a real OpenSSH server on 127.0.0.1.

paramiko's Channel.close() closed the channel's wake-up pipe while its transport thread could be writing to it:
the thread died (EBADF or EPIPE) and the command was reported as a lost connection. The race is narrow, so the
test closes many streaming channels on one connection (with plain Channel.close(), 2 of 100 closes killed it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from reconciler.transport.session import close_channel, open_channel, wait_readable
from tests.transport.sshd_server import SSHD, Sshd
from tests.transport.test_ssh_transport import make_transport, spec

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")
CLOSES = 100


def test_closing_channels_while_output_streams_in_keeps_the_connection(
        tmp_path: Path, sshd_factory: object, client_key: tuple[Path, str]) -> None:
    server: Sshd = sshd_factory("MaxSessions 1000")  # type: ignore[operator]  # the cut-off commands wait
    node = spec("gpu01", server.port, client_key[0])
    with make_transport(tmp_path, [server]) as transport:
        link = transport.connection(node).client.get_transport()
        for _ in range(CLOSES):
            channel = open_channel(link, 10)
            channel.settimeout(0.0)
            fd = channel.fileno()  # the wake-up pipe the race was about
            channel.exec_command("cat /dev/zero")
            received, deadline = 0, time.monotonic() + 30
            while received < 2**18 or channel.recv_ready():  # stop right after emptying it, as at the bound
                assert time.monotonic() < deadline, "no output from cat /dev/zero"
                if channel.recv_ready():
                    received += len(channel.recv(2**16))
                else:
                    wait_readable(fd, 0.5)
            close_channel(channel)
            assert link.is_active(), f"the connection died closing a channel: {link.saved_exception!r}"
        assert transport.run(node, "echo still").stdout == "still\n"
        assert transport.total_connects() == 1
