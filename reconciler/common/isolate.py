"""Run a function in a forked child under CPU-time, memory and wall-clock limits (issue 13, PR planning).

The child sets RLIMIT_CPU (soft = the limit: SIGXCPU ends it; hard one second later) and RLIMIT_AS (the
address space it inherited plus the memory allowance: a fork starts with the parent's mappings, so an
absolute limit would be meaningless), runs the function and sends the result back through a pipe. The
parent waits at most the wall-clock limit, then kills it. Whatever the child does, the parent gets either
the result or the name of the limit it broke, and goes on.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any


@dataclass(frozen=True)
class Limits:
    """What one isolated run may use."""

    cpu_seconds: int = 60
    memory_bytes: int = 1 << 30  # on top of what the child inherits from the daemon
    wall_seconds: float = 120.0

    def describe(self, which: str) -> str:
        """`CPU-time limit of 60 s`, `memory limit of 1024 MiB`, `wall-clock limit of 120 s`."""
        return {"cpu": f"CPU-time limit of {self.cpu_seconds} s",
                "memory": f"memory limit of {self.memory_bytes >> 20} MiB",
                "wall": f"wall-clock limit of {self.wall_seconds:g} s"}[which]


class LimitExceeded(Exception):
    """The isolated run broke a limit; `which` is cpu, memory or wall."""

    def __init__(self, which: str, limits: Limits, detail: str = "") -> None:
        self.which = which
        super().__init__(limits.describe(which) + (f" ({detail})" if detail else ""))


class ChildFailed(Exception):
    """The child died without a result and without breaking a limit we know of."""


def _address_space() -> int:
    """The current virtual size of this process in bytes (VmSize)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _child(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        cap = _address_space() + limits.memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        try:
            message: tuple[str, Any] = ("ok", fn(*args))
        except MemoryError:
            message = ("memory", None)
        except Exception as exc:  # noqa: BLE001 - reported to the parent as the child's failure
            message = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(message)
        except MemoryError:
            conn.send(("memory", None))
    finally:
        conn.close()


def run_limited(fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits) -> Any:
    """Return fn(*args) run in a child under LIMITS; raise LimitExceeded or ChildFailed."""
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child_end, fn, args, limits), daemon=True)
    started = time.monotonic()
    proc.start()
    child_end.close()
    message: tuple[str, Any] | None = None
    killed = False
    try:
        if parent_end.poll(limits.wall_seconds):
            try:
                message = parent_end.recv()
            except (EOFError, OSError):
                message = None
        else:
            killed = True
    finally:
        parent_end.close()
        if killed or proc.is_alive():
            proc.join(0.5 if not killed else 0)
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    elapsed = time.monotonic() - started
    if killed:
        raise LimitExceeded("wall", limits, f"killed after {elapsed:.1f} s")
    if message is not None:
        kind, value = message
        if kind == "ok":
            return value
        if kind == "memory":
            raise LimitExceeded("memory", limits)
        raise ChildFailed(str(value))
    code = proc.exitcode
    if code in (-signal.SIGXCPU, -signal.SIGKILL):  # SIGKILL: the hard CPU limit, one second after SIGXCPU
        raise LimitExceeded("cpu", limits)
    raise ChildFailed(f"the planning process ended without a result (exit code {code})")
