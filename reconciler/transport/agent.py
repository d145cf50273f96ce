"""A command kept running on a node and asked one line at a time: the daemon's fact agent.

The command is started once on its own session channel of the node's (persistent) connection; each question is
one line on its stdin and each answer one line on its stdout. A cycle then costs one write and one read per node
instead of a channel, a shell and an interpreter start. The transport decides when an agent is stale (its
connection dropped, a question timed out) and starts a new one.
"""

from __future__ import annotations

import contextlib
import time

import paramiko

from reconciler.transport.bounds import MAX_OUTPUT, too_large_error
from reconciler.transport.session import close_channel, end_remote, exec_with_deadline, take_pgid, wait_readable

_CHUNK = 65536
_STDERR_KEPT = 4096
_EXIT_WAIT = 2.0


class AgentExited(Exception):
    """The agent's channel closed before a whole answer line came: its exit code (None: unknown) and stderr."""

    def __init__(self, exit_code: int | None, stderr: str, answered: int) -> None:
        super().__init__(stderr.strip().splitlines()[-1] if stderr.strip() else f"exit code {exit_code}")
        self.exit_code = exit_code
        self.stderr = stderr
        self.answered = answered  # how many questions it had answered before (0: it never worked)


class AgentTimeout(Exception):
    """No whole answer line within the time allowed; the channel is closed (the agent goes with it)."""


class AgentChannel:
    """One running command on one session channel, asked a line, answering a line."""

    def __init__(self, channel: paramiko.Channel, command: str, timeout: float, *, exec_as: str | None = None) -> None:
        """Start COMMAND on CHANNEL (sent as EXEC_AS, e.g. wrapped in sudo, when given)."""
        self.channel = channel
        self.command = command
        self.sudo = (exec_as or command).startswith("sudo ")
        self.pgid: int | None = None  # told on stderr by a `wrap_tracked` command
        self.answered = 0
        self._buffer = bytearray()
        self._stderr = bytearray()
        if not exec_with_deadline(channel, exec_as or command, timeout):
            raise AgentTimeout()
        channel.settimeout(0.0)

    @property
    def alive(self) -> bool:
        """True while the channel is open and its connection active (the agent may still have died: `ask` says)."""
        transport = self.channel.get_transport()
        return not self.channel.closed and not self.channel.exit_status_ready() and bool(
            transport and transport.is_active())

    def ask(self, line: bytes, timeout: float) -> bytes:
        """Send one line, return the answer line (without its newline); AgentExited or AgentTimeout otherwise."""
        deadline = time.monotonic() + timeout
        self._send(line.rstrip(b"\n") + b"\n", deadline)
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                answer = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                self.answered += 1
                return answer
            if len(self._buffer) > MAX_OUTPUT:  # no newline in 64 MiB: a broken or hostile agent
                self.close(stuck=True)
                raise AgentExited(None, too_large_error(), self.answered)
            if not self._receive(deadline):
                raise self._exited()

    def close(self, stuck: bool = False) -> None:
        """Close the channel: the agent reads EOF (or is hung up on) and exits; STUCK (cut off at a deadline or the
        output bound: it may read nothing more): ended on the node first (`end_remote`)."""
        with contextlib.suppress(Exception):  # closing is best effort
            if stuck:
                end_remote(self.channel, self.pgid, self.sudo)
            close_channel(self.channel)  # output may still be arriving: see close_channel

    def _send(self, data: bytes, deadline: float) -> None:
        """Write all of DATA within the deadline."""
        view = memoryview(data)
        while view:
            if self.channel.closed or self.channel.exit_status_ready():
                raise self._exited()
            if self.channel.send_ready():
                try:
                    sent = self.channel.send(bytes(view[:_CHUNK]))
                except (OSError, paramiko.SSHException, TimeoutError) as exc:
                    raise self._exited() from exc
                view = view[sent:]
                continue
            self._wait(deadline, 0.01)

    def _receive(self, deadline: float) -> bool:
        """Move arrived output into the buffers, waiting for some; False when the channel has ended."""
        while True:
            got = False
            while self.channel.recv_stderr_ready():
                self._stderr += self.channel.recv_stderr(_CHUNK)
                if self.pgid is None:
                    self.pgid = take_pgid(self._stderr)
                del self._stderr[:-_STDERR_KEPT]
            while self.channel.recv_ready():
                data = self.channel.recv(_CHUNK)
                if not data:
                    break
                self._buffer += data
                got = True
            if got:
                return True
            if self.channel.closed or self.channel.eof_received:
                return False
            self._wait(deadline, 0.5)

    def _wait(self, deadline: float, most: float) -> None:
        """Sleep until output arrives or MOST seconds pass; AgentTimeout at the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            self.close(stuck=True)
            raise AgentTimeout()
        wait_readable(self.channel.fileno(), min(left, most))

    def _exited(self) -> AgentExited:
        """Why the agent is gone: its exit status if one comes soon, and the end of its stderr."""
        self.channel.status_event.wait(_EXIT_WAIT)
        while self.channel.recv_stderr_ready():
            self._stderr += self.channel.recv_stderr(_CHUNK)
        if self.pgid is None:
            self.pgid = take_pgid(self._stderr)
        code = self.channel.exit_status if self.channel.exit_status_ready() else -1
        self.close()
        stderr = bytes(self._stderr[-_STDERR_KEPT:]).decode("utf-8", errors="replace")
        return AgentExited(code if code >= 0 else None, stderr, self.answered)
