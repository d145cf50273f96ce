"""A transport that runs every 'node' command in a local `sh` (stdin passed): the real lease and fence scripts,
real flock and fsync, on files in a temporary directory."""

from __future__ import annotations

import subprocess
import time

from reconciler.desired.inventory import NodeSpec
from reconciler.transport.base import BaseTransport, CommandResult


def spec(name: str) -> NodeSpec:
    """A node spec (only its name matters to a local shell)."""
    return NodeSpec(name=name, host=name, port=22, user="root", identity_file=None, proxy_jump=None,
                    roles=frozenset(), service_manager="systemd", drain=None)


class LocalShell(BaseTransport):
    """Runs each command in `sh -c` here; records what was sent."""

    def __init__(self) -> None:
        super().__init__(4)
        self.sent: list[tuple[str, str]] = []

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        self.sent.append((node.name, command))
        started = time.monotonic()
        done = subprocess.run(["sh", "-c", command], input=stdin or "", capture_output=True, text=True,
                              timeout=timeout or 60, check=False)
        return CommandResult(node.name, done.returncode, done.stdout, done.stderr, time.monotonic() - started)
