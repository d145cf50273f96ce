"""One reconcile: load, connect, gather, plan, and (optionally) apply."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.common import hostlist
from reconciler.desired.loader import LoadedState
from reconciler.desired.source import describe_source
from reconciler.engine.apply import ApplyOptions, ApplyResult, Log, apply_plan
from reconciler.engine.context import Context
from reconciler.engine.driver import Driver
from reconciler.engine.gather import gather
from reconciler.engine.plan import Plan
from reconciler.engine.planner import make_plan
from reconciler.transport.base import Transport
from reconciler.transport.idempotent import for_idempotent
from reconciler.transport.ssh import SSHTransport


@dataclass
class Reconcile:
    """A reconcile of one desired state against the live cluster."""

    ctx: Context
    transport: Transport
    drivers: list[Driver]

    def gather(self) -> None:
        """Gather facts from every target node in one round trip each (repeated once if a connection drops)."""
        self.ctx.facts = gather(self.ctx, for_idempotent(self.transport), self.drivers)

    def plan(self) -> Plan:
        """Plan against the facts gathered."""
        return make_plan(self.ctx, self.drivers)

    def apply(self, plan: Plan, options: ApplyOptions | None = None, log: Log = lambda _: None) -> ApplyResult:
        """Apply a plan made from these facts."""
        return apply_plan(self.ctx, plan, self.transport, options, log)

    def close(self) -> None:
        """Close every SSH connection."""
        self.transport.close()


def open_reconcile(loaded: LoadedState, drivers: Sequence[Driver], *, limit: str | None = None,
                   forks: int | None = None, transport: Transport | None = None) -> Reconcile:
    """Set up a reconcile: context, SSH transport, and the drivers it plans with (the engine knows none by name)."""
    names = set(hostlist.expand(limit)) if limit else None
    ctx = Context(loaded=loaded, source=describe_source(loaded.root, loaded.commit), limit=names)
    if transport is None and loaded.state.ssh.gateways:  # ClusterShell tree mode through the gateways
        from reconciler.transport.clush import ClushTransport

        transport = ClushTransport(loaded.state.ssh, Path(loaded.root), forks=forks)
    if transport is None:
        transport = SSHTransport(loaded.state.ssh, Path(loaded.root), forks=forks)
    return Reconcile(ctx=ctx, transport=transport, drivers=list(drivers))
