"""Run one command on an open SSH transport: stdin in, stdout/stderr out, with a deadline.

The command runs on its own paramiko session channel rather than through fabric's `Connection.run`
(invoke's runner), because that runner feeds stdin one byte per 10 ms (file contents of a few
hundred KiB would take minutes) and decodes output in 1000-byte chunks, garbling a UTF-8
character split across two chunks. Here bytes are collected whole and decoded once.
"""

from __future__ import annotations

import contextlib
import select
import shlex
import threading
import time
from dataclasses import dataclass

import paramiko

from reconciler.transport.bounds import MAX_OUTPUT as MAX_OUTPUT  # re-exported: where callers used to find it
from reconciler.transport.bounds import MAX_STDERR as MAX_STDERR
from reconciler.transport.bounds import BoundedOutput

_CHUNK = 32768
_POLL = 0.5
PGID_WAIT = 3.0  # seconds a command cut off at its deadline may still take to tell its process group


@dataclass(frozen=True)
class Outcome:
    """What came back from one command: exit code (None: timed out or no exit status) and raw output."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    too_large: bool = False  # the node sent more than MAX_OUTPUT: cut off, nothing of it is read
    pgid: int | None = None  # the command's process group on the node, when it told it (`wrap_tracked`)


def wrap_command(command: str, user: str) -> str:
    """The remote command line: `sh -c CMD` as root, `sudo -n sh -c CMD` otherwise (never prompts)."""
    inner = f"sh -c {shlex.quote(command)}"
    return inner if user == "root" else f"sudo -n -- {inner}"


class SessionOpenError(Exception):
    """No session channel could be opened: nothing was sent, so the command may be retried."""


def open_channel(transport: paramiko.Transport | None, timeout: float) -> paramiko.Channel:
    """A new session channel on the transport; SessionOpenError when the connection is gone."""
    if transport is None or not transport.is_active():
        raise SessionOpenError("the connection is closed")
    try:
        return transport.open_session(timeout=timeout)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise SessionOpenError(str(exc) or type(exc).__name__) from exc


def run_on_channel(channel: paramiko.Channel, command: str, stdin: bytes | None, timeout: float) -> Outcome:
    """Run `command` on an opened session channel, then close it; close it early at the deadline (the command, cut
    off there or at the output bound, is ended on the node first: `end_remote`)."""
    deadline = time.monotonic() + timeout
    try:
        channel.settimeout(0.0)
        if not exec_with_deadline(channel, command, timeout):
            return Outcome(None, b"", b"", timed_out=True)
        outcome = _pump(channel, stdin or b"", deadline)
        if outcome.timed_out or outcome.too_large:
            end_remote(channel, outcome.pgid, command.startswith("sudo "))
        return outcome
    finally:
        close_channel(channel)


PGID_MARK = b"\x1ereconciler-pgid "
# Shell builtins only (no process started): the command's process group, as the first line of its stderr, taken
# out of the stderr the caller sees (`take_pgid`).
_PGID_PREFIX = r"""read -r _ _ _ _ g _ </proc/$$/stat 2>/dev/null && printf '\036reconciler-pgid %s\n' "$g" >&2; """


def wrap_tracked(command: str, user: str) -> str:
    """`wrap_command`, the command first telling its process group on stderr, so a cut-off can end it
    (`end_remote`)."""
    return wrap_command(_PGID_PREFIX + command, user)


def take_pgid(stderr: bytearray) -> int | None:
    """The process group a `wrap_tracked` command told, taken out of STDERR (in place); None until it came."""
    at = stderr.find(PGID_MARK)
    end = stderr.find(b"\n", at) if at >= 0 else -1
    if end < 0:
        return None
    text = bytes(stderr[at + len(PGID_MARK):end])
    del stderr[at:end + 1]
    return int(text) if text.isdigit() and int(text) > 1 else None


def end_remote(channel: paramiko.Channel, pgid: int | None, sudo: bool, timeout: float = 5.0) -> None:
    """End a command cut off at its deadline or the output bound on the node: KILL its process group (the command
    and what it started, short of what left the group), over a new session of the same connection.

    Closing the channel alone does not end it: sshd keeps a session whose command has no terminal until that command
    exits (OpenSSH's session_close_by_channel, "has child"), so a `sleep` cut off at its timeout held one of the
    connection's MaxSessions until the connection closed. RFC 4254's "signal" request is no way out: OpenSSH 9.2
    refuses it for root logins ("session signalling requires privilege separation", seen on the test sshd), and
    under sudo the login user may not signal root's processes; `kill` as the command's own user may.
    """
    if pgid is None or channel.exit_status_ready():
        return
    transport = channel.get_transport()
    try:
        killer = open_channel(transport, timeout)
    except SessionOpenError:
        return  # the connection is gone: sshd ends nothing more for it, and nothing more is held either
    kill = f"kill -s KILL -- -{pgid} 2>/dev/null; true"
    with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
        killer.settimeout(0.0)
        if exec_with_deadline(killer, f"sudo -n -- sh -c {shlex.quote(kill)}" if sudo else kill, timeout):
            killer.shutdown_write()
            killer.status_event.wait(timeout)
    close_channel(killer)


def close_channel(channel: paramiko.Channel) -> None:
    """Close a channel whose output may still be arriving (cut off at the bound or the deadline), quietly.

    paramiko's transport thread tells of arrived data by writing a byte to the channel's wake-up pipe (made by
    `fileno()`), and Channel.close() closes that pipe without holding the buffers' locks: data arriving during
    the close was written to a closed descriptor, the transport thread died (EBADF, EPIPE) and the command was
    reported as a lost connection (and a reused descriptor number could have taken the byte). Plain events are
    swapped in first, under the buffers' locks, so no write to the pipe is under way or can start once it closes.
    """
    for buffer in (getattr(channel, "in_buffer", None), getattr(channel, "in_stderr_buffer", None)):
        if buffer is not None:  # (a stand-in channel has none)
            buffer.set_event(threading.Event())
    with contextlib.suppress(paramiko.SSHException, EOFError, OSError):  # the outcome is already known
        channel.close()


def exec_with_deadline(channel: paramiko.Channel, command: str, timeout: float) -> bool:
    """Send the exec request; False when the server did not answer in time (paramiko would wait forever)."""
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        channel.close()

    watchdog = threading.Timer(timeout, expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        channel.exec_command(command)
    except paramiko.SSHException:
        if fired.is_set():
            return False
        raise
    finally:
        watchdog.cancel()
    return not fired.is_set()


def _pump(channel: paramiko.Channel, stdin: bytes, deadline: float) -> Outcome:
    """Feed stdin and collect output until the command exits or the deadline passes."""
    pending = memoryview(stdin)
    if not pending:
        channel.shutdown_write()
    output = BoundedOutput()
    fd = channel.fileno()
    group: list[int | None] = [None]
    while not _finished(channel):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _await_pgid(channel, output, group, keep_stdout=True)
            return Outcome(None, bytes(output.stdout), bytes(output.stderr), timed_out=True, pgid=group[0])
        pending = _feed(channel, pending)
        if not _drain(channel, output, group):  # a broken or hostile node cannot make the daemon hold more
            _await_pgid(channel, output, group)
            return Outcome(None, b"", bytes(output.stderr), timed_out=False, too_large=True, pgid=group[0])
        if not _finished(channel):
            _wait(channel, fd, min(remaining, 0.01 if pending else _POLL))
    if not _drain(channel, output, group):
        _await_pgid(channel, output, group)
        return Outcome(None, b"", bytes(output.stderr), timed_out=False, too_large=True, pgid=group[0])
    code = channel.recv_exit_status()  # -1: no exit-status came (killed by a signal, or the session died)
    return Outcome(code if code >= 0 else None, bytes(output.stdout), bytes(output.stderr), timed_out=False)


def _await_pgid(channel: paramiko.Channel, output: BoundedOutput, group: list[int | None],
                keep_stdout: bool = False) -> None:
    """A command cut off before its process group came (a deadline shorter than a loaded node's shell start; or
    its stdout, a separate stream, passed the bound first): wait a little more for that line on stderr, so the
    command can still be ended. Its stdout is still read, so the window stays open: kept within the bound for a
    command cut off at its deadline (KEEP_STDOUT: what it printed is part of the report), dropped otherwise."""
    until = time.monotonic() + PGID_WAIT
    while group[0] is None and not channel.closed and time.monotonic() < until:
        while channel.recv_ready():
            data = channel.recv(_CHUNK)
            if keep_stdout:
                keep_stdout = output.add_stdout(data)
        while channel.recv_stderr_ready():
            output.add_stderr(channel.recv_stderr(_CHUNK))
        group[0] = take_pgid(output.stderr)
        if group[0] is None:
            wait_readable(channel.fileno(), 0.05)


def _finished(channel: paramiko.Channel) -> bool:
    """True when the command exited and all its output is in (EOF seen, or the channel closed)."""
    done = bool(channel.closed or (channel.exit_status_ready() and channel.eof_received))
    return done and not channel.recv_ready() and not channel.recv_stderr_ready()


def _feed(channel: paramiko.Channel, pending: memoryview) -> memoryview:
    """Send as much stdin as the window allows; send EOF after the last byte."""
    if not pending:
        return pending
    try:
        while pending and channel.send_ready():
            sent = channel.send(bytes(pending[:_CHUNK]))
            pending = pending[sent:]
    except (TimeoutError, OSError, paramiko.SSHException):
        return memoryview(b"")  # the command closed its stdin or exited: drop the rest
    if not pending:
        channel.shutdown_write()
    return pending


def _drain(channel: paramiko.Channel, output: BoundedOutput, group: list[int | None]) -> bool:
    """Move whatever stdout and stderr data has arrived into OUTPUT (the process group a tracked command tells on
    stderr into GROUP); False once its stdout is over the bound."""
    while channel.recv_stderr_ready():
        output.add_stderr(channel.recv_stderr(_CHUNK))
        if group[0] is None and PGID_MARK[:1] in output.stderr:
            group[0] = take_pgid(output.stderr)
    while channel.recv_ready():
        if not output.add_stdout(channel.recv(_CHUNK)):
            return False
    return True


def _wait(channel: paramiko.Channel, fd: int, seconds: float) -> None:
    """Sleep until output arrives, the exit status arrives, or `seconds` pass."""
    if channel.eof_received:
        channel.status_event.wait(seconds)  # the pipe stays readable after EOF: wait on the status instead
        return
    wait_readable(fd, seconds)


def wait_readable(fd: int, seconds: float) -> None:
    """Sleep until FD is readable or SECONDS pass (poll(2): select() fails for descriptors past 1023)."""
    poller = select.poll()
    try:
        poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(seconds * 1000)))
    except (OSError, ValueError):
        time.sleep(min(seconds, 0.01))
