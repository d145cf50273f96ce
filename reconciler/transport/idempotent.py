"""Commands safe to repeat (fact gathering): a view of an SSHTransport that retries a dropped connection once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reconciler.desired.inventory import NodeSpec
from reconciler.transport.base import BaseTransport, CommandResult
from reconciler.transport.ssh import SSHTransport


class IdempotentCommands(BaseTransport):
    """A view of an SSHTransport for commands safe to repeat (fact gathering): a dropped connection is retried once."""

    def __init__(self, inner: SSHTransport) -> None:
        super().__init__(inner.forks)
        self.inner = inner
        self.round_trips = inner.round_trips
        self.agents = inner.agents

    def ask_many(self, nodes: list[NodeSpec], command: str, line: Callable[[NodeSpec], str], *,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """The inner transport's agents (their questions are idempotent by contract)."""
        return self.inner.ask_many(nodes, command, line, timeout=timeout)

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        """Run on the inner transport, once more on a fresh connection if the connection dropped."""
        return self.inner.run(node, command, stdin=stdin, timeout=timeout, retry_lost=True)

    def close(self) -> None:
        """Nothing: the inner transport's owner closes it."""


def for_idempotent(transport: Any) -> Any:
    """The transport to use for idempotent commands: a retrying view of an SSHTransport, else itself."""
    if isinstance(transport, SSHTransport):
        return IdempotentCommands(transport)
    if hasattr(transport, "with_inner"):  # a leader's FencingTransport: fenced over the retrying view
        return transport.with_inner(for_idempotent)
    return transport
