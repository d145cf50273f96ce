"""Driver for NFS exports: the managed block of /etc/exports, validated and applied by `exportfs -ra`."""

from __future__ import annotations

import shlex

from reconciler.drivers.blocks import block_change
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.plan import Change
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import NodeFacts
from reconciler.render.storage import exports_block

EXPORTS = "/etc/exports"
EXPORTFS = "exportfs -ra"


class NfsExportsDriver(DriverDefaults):
    """Keeps the exports of NFS server nodes; a rejected /etc/exports is rolled back."""

    name = "nfs_exports"
    scope = "cluster"  # an export serves every node that mounts it
    phase = phase_of("nfs_exports")

    def _manages(self, ctx: Context, node: str) -> bool:
        return "nfs-server" in ctx.specs[node].roles or exports_block(ctx.state.storage, node) is not None

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Ask for /etc/exports on NFS servers."""
        if self._manages(ctx, node):
            req.files.append(EXPORTS)

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """One change when the managed block differs; `exportfs -ra` must accept the new file."""
        if not self._manages(ctx, node):
            return []
        body = exports_block(ctx.state.storage, node)
        paths = [shlex.quote(e.path) for e in ctx.state.storage.exports if e.server == node]
        after = f"mkdir -p {' '.join(paths)} && {EXPORTFS}" if paths else EXPORTFS
        change = block_change(self.name, node, EXPORTS, facts.files.get(EXPORTS), body, phase=self.phase,
                              after=after)
        return [change]
