"""What every transport offers: run a command on one node or many in parallel, and count round trips."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from reconciler.desired.inventory import NodeSpec

CommandFor = str | Callable[[NodeSpec], str | None]
StdinFor = str | Callable[[NodeSpec], str | None] | None


@dataclass
class CommandResult:
    """The outcome of one command on one node: exit code and output, or why it could not run."""

    node: str
    exit_code: int | None
    stdout: str
    stderr: str
    duration: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the command ran and exited 0."""
        return self.error is None and self.exit_code == 0

    @property
    def unreachable(self) -> bool:
        """True when the command got no exit code: connect/auth/host key failure, timeout, lost session."""
        return self.error is not None

    def describe(self) -> str:
        """A one-line summary for logs and error messages."""
        if self.error is not None:
            return f"{self.node}: {self.error}"
        tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-1:] or [""]
        return f"{self.node}: exit {self.exit_code}" + (f": {tail[0]}" if tail[0] else "")


@runtime_checkable
class Transport(Protocol):
    """Runs shell commands on nodes; drivers and facts use only this, never SSH directly."""

    round_trips: dict[str, int]

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        """Run one command on one node (as root); never raise for the node's failure."""
        ...

    def run_many(self, nodes: list[NodeSpec], command: CommandFor, *, stdin: StdinFor = None,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """Run a command (or a per-node command) on many nodes in parallel, keyed by node name."""
        ...

    def close(self) -> None:
        """Close every connection."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


@runtime_checkable
class AgentTransport(Protocol):
    """A transport that can keep a command running per node and ask it one line at a time (persistent sessions)."""

    agents: bool  # False: `ask_many` is not to be used (a one-shot transport)

    def ask_many(self, nodes: list[NodeSpec], command: str, line: Callable[[NodeSpec], str], *,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """Ask each node's running COMMAND (started on first use) one line; its answer line is the stdout.

        For idempotent questions only: an agent found dead is started again and asked once more."""
        ...


class BaseTransport:
    """Shared machinery: bounded parallel `run_many`, round-trip counters, context manager."""

    def __init__(self, forks: int) -> None:
        if forks < 1:
            raise ValueError(f"forks must be at least 1, got {forks}")
        self.forks = forks
        self.round_trips: dict[str, int] = {}
        self._counter_lock = threading.Lock()

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        """Run one command on one node; subclasses implement it."""
        raise NotImplementedError

    def close(self) -> None:
        """Close every connection; subclasses override it."""

    def count_round_trip(self, node: str) -> None:
        """Record one command sent to a node and answered (or timed out)."""
        with self._counter_lock:
            self.round_trips[node] = self.round_trips.get(node, 0) + 1

    def total_round_trips(self) -> int:
        """All round trips so far, over all nodes."""
        with self._counter_lock:
            return sum(self.round_trips.values())

    def reset_counters(self) -> None:
        """Forget the counted round trips."""
        with self._counter_lock:
            self.round_trips.clear()

    def run_many(self, nodes: list[NodeSpec], command: CommandFor, *, stdin: StdinFor = None,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """Run on many nodes with at most `forks` at a time; a callable giving None skips that node."""
        def one(spec: NodeSpec) -> CommandResult | None:
            cmd = command(spec) if callable(command) else command
            if cmd is None:
                return None
            data = stdin(spec) if callable(stdin) else stdin
            return self.run(spec, cmd, stdin=data, timeout=timeout)

        return self.map_nodes(nodes, one)

    def map_nodes(self, nodes: list[NodeSpec],
                  one: Callable[[NodeSpec], CommandResult | None]) -> dict[str, CommandResult]:
        """Call ONE for every distinct node, at most `forks` at a time; None results are left out, and an
        exception becomes that node's error result (one node's failure never aborts the others)."""
        unique: dict[str, NodeSpec] = {}
        for spec in nodes:
            unique.setdefault(spec.name, spec)
        if not unique:
            return {}

        def guarded(spec: NodeSpec) -> CommandResult | None:
            try:
                return one(spec)
            except Exception as exc:  # noqa: BLE001 - reported as the node's result
                error = f"internal error: {type(exc).__name__}: {exc}"
                return CommandResult(spec.name, None, "", "", 0.0, error=error)

        with ThreadPoolExecutor(max_workers=min(self.forks, len(unique)), thread_name_prefix="ssh") as pool:
            futures = [(name, pool.submit(guarded, spec)) for name, spec in unique.items()]
            results = {name: future.result() for name, future in futures}
        return {name: result for name, result in results.items() if result is not None}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
