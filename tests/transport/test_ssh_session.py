"""The command runner on a channel, with stand-in channels for what a real sshd will not do on demand."""

from __future__ import annotations

import threading
import time

import paramiko

from reconciler.transport.session import run_on_channel


class SilentChannel:
    """A channel whose server never answers the exec request: exec_command blocks until close()."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def settimeout(self, timeout: float) -> None:
        pass

    def exec_command(self, command: str) -> None:
        self.closed.wait()
        raise paramiko.SSHException("Channel closed.")

    def close(self) -> None:
        self.closed.set()


def test_unanswered_exec_request_times_out_instead_of_hanging() -> None:
    channel = SilentChannel()
    start = time.monotonic()
    outcome = run_on_channel(channel, "true", None, timeout=0.3)  # type: ignore[arg-type]
    assert outcome.timed_out and outcome.exit_code is None
    assert 0.25 < time.monotonic() - start < 3
    assert channel.closed.is_set()
