"""Fencing tokens on the nodes: a leader's epoch travels with every write and command; nodes refuse older epochs.

A deposed leader (paused, partitioned, not yet aware) may still send. Each node keeps the highest epoch it has
seen in `/var/lib/reconciler/fence.json` (under `fence.lock`), and refuses a request carrying a lower one: the
file writer refuses the request's writes (reconciler/engine/remote_write.py), a fenced command exits
FENCED_EXIT without running. So once a successor has reached a node, nothing of its predecessor lands there.
`FencingTransport` wraps the transport of the daemon that holds the lease (reconciler/ha).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any

from reconciler.common.failpoints import failpoint
from reconciler.desired.inventory import NodeSpec
from reconciler.facts.fence_script import FENCE_CHECK_SOURCE
from reconciler.transport.base import CommandResult, Transport

FENCE_DIR = "/var/lib/reconciler"  # on each node: fence.json (highest epoch seen), fence.lock, writes.log
FENCED_EXIT = 75  # EX_TEMPFAIL: a fenced command that was refused
FENCED_PREFIX = "fenced: "

# argv: EPOCH HOLDER DIR COMMAND. Checks (and records) the epoch, then becomes `sh -c COMMAND` (same stdin/stdout).
RUN_SCRIPT = FENCE_CHECK_SOURCE + r'''
import os, sys
lock, refusal = fence_check({"epoch": sys.argv[1], "holder": sys.argv[2], "dir": sys.argv[3]})
if refusal:
    sys.stderr.write(refusal + "\n"); sys.exit(75)
lock.close()
os.execv("/bin/sh", ["sh", "-c", sys.argv[4]])
'''


def fenced_command(command: str, fence: dict[str, Any]) -> str:
    """COMMAND, run on the node only while FENCE's epoch is not older than the highest the node has seen."""
    return " ".join(["python3", "-c", shlex.quote(RUN_SCRIPT), str(int(fence["epoch"])),
                     shlex.quote(str(fence.get("holder") or "")), shlex.quote(str(fence.get("dir") or FENCE_DIR)),
                     shlex.quote(command)])


def is_fenced(result: CommandResult) -> bool:
    """Whether a node refused the command, the writes or the fact request for an older epoch."""
    text = result.stderr + result.stdout
    return FENCED_PREFIX in text and (result.exit_code == FENCED_EXIT or re.search(r'"error":\s*"fenced: ', text)
                                      is not None)


NOT_LEADER = "this daemon no longer holds the lease; nothing sent"


def _unsent(nodes: list[NodeSpec]) -> dict[str, CommandResult]:
    """The local check refused: a result per node, nothing sent."""
    return {n.name: CommandResult(n.name, None, "", "", 0.0, error=NOT_LEADER) for n in nodes}


class FencingTransport:
    """A transport whose every command carries the current epoch (FENCE()); a refusal calls ON_FENCED.

    FENCE returns None when this process believes it no longer leads: the command is then not sent at all and
    fails here (the local check). The nodes' check covers what the local one cannot see: a process paused after
    its check, a lease that expired while a request was on the wire.
    """

    def __init__(self, inner: Transport, fence: Callable[[], dict[str, Any] | None],
                 on_fenced: Callable[[str], None], write_command: str) -> None:
        self.inner, self.fence, self.on_fenced, self.write_command = inner, fence, on_fenced, write_command

    @property
    def round_trips(self) -> dict[str, int]:
        """The wrapped transport's counters."""
        return self.inner.round_trips

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # ask_many (fact agents: read-only), counters, new_cycle, ...

    def _wrap(self, command: str, stdin: str | None, fence: dict[str, Any]) -> tuple[str, str | None]:
        if command == self.write_command:
            failpoint("fence.before-write")
            return command, _with_fence(stdin, fence)
        return fenced_command(command, fence), stdin

    def _seen(self, result: CommandResult) -> CommandResult:
        if is_fenced(result):
            self.on_fenced(f"{result.node}: {_refusal(result)}")
        return result

    def with_inner(self, wrap: Callable[[Any], Any]) -> FencingTransport:
        """The same fencing over WRAP(the wrapped transport) (e.g. its retrying view for idempotent reads)."""
        return FencingTransport(wrap(self.inner), self.fence, self.on_fenced, self.write_command)

    def ask_many(self, nodes: list[NodeSpec], command: str, line: Callable[[NodeSpec], Any], *,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """Ask each node's fact agent, the epoch added to the request: an agent refuses an older one."""
        fence = self.fence()
        if fence is None:
            return _unsent(nodes)
        token = repr(dict(fence))

        def fenced_line(spec: NodeSpec) -> str:
            text = line(spec)
            raw = text.decode() if isinstance(text, bytes) else str(text)
            return "{**" + raw.rstrip("\n") + ', "fence": ' + token + "}"  # a Python literal, as agents read it

        results: dict[str, CommandResult] = self.inner.ask_many(nodes, command, fenced_line,  # type: ignore[attr-defined]
                                                                timeout=timeout)
        for result in results.values():
            self._seen(result)
        return results

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        """Run COMMAND fenced (see the class)."""
        fence = self.fence()
        if fence is None:
            return _unsent([node])[node.name]
        wrapped, body = self._wrap(command, stdin, fence)
        return self._seen(self.inner.run(node, wrapped, stdin=body, timeout=timeout))

    def run_many(self, nodes: list[NodeSpec], command: Any, *, stdin: Any = None,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """Run a command (or a per-node command) on many nodes, each fenced."""
        fence = self.fence()
        if fence is None:
            return _unsent(nodes)
        if callable(command):
            def wrapped(spec: NodeSpec) -> str:
                return fenced_command(command(spec), fence)

            results = self.inner.run_many(nodes, wrapped, stdin=stdin, timeout=timeout)
        else:  # one command line for all: a tree transport (ClusterShell) can still fan it out as one
            results = self.inner.run_many(nodes, fenced_command(command, fence), stdin=stdin, timeout=timeout)
        for result in results.values():
            self._seen(result)
        return results

    def close(self) -> None:
        """Close the wrapped transport."""
        self.inner.close()

    def __enter__(self) -> FencingTransport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _with_fence(stdin: str | None, fence: dict[str, Any]) -> str:
    import json

    request = json.loads(stdin or "[]")
    writes = request["writes"] if isinstance(request, dict) else request
    return json.dumps({"fence": fence, "writes": writes})


def _refusal(result: CommandResult) -> str:
    for line in (result.stderr + "\n" + result.stdout).splitlines():
        if FENCED_PREFIX in line:
            start = line.index(FENCED_PREFIX)
            return line[start:].split('"')[0].strip()
    return "fenced"
