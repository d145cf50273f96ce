"""Driver for `motd:` (reconciler/model/motd.py): the message-of-the-day file of each node, written exactly.

The smallest whole managed kind, and the proof of README's "Where a change goes": it asks for its file's fact
(a file fact: NodeFacts.files, no fact snippet of its own), plans a write where the content or mode differs,
and says what a converged node holds (for planning without SSH: drivers/converged.py). Validate's checks of
its entries (nodes in the inventory, one entry per path and node, `files:` not writing its path) come from its
Section in DesiredState; its place in the apply order and in `all_drivers()` from its row in drivers/phases.py.
An entry removed leaves the file as it is: without a header (users would see it) nothing marks it as ours.
"""

from __future__ import annotations

from reconciler.desired.managed import selects
from reconciler.drivers.base import file_change
from reconciler.drivers.converged import file_fact
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.plan import Change
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import NodeFacts
from reconciler.model.motd import Motd


class MotdDriver(DriverDefaults):
    """Keeps each node's message of the day as `motd:` says."""

    name = "motd"
    phase = phase_of("motd")

    def _entries(self, ctx: Context, node: str) -> list[Motd]:
        return [item for item in ctx.state.motd if selects(ctx.state, item, node)]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """The file of each entry selecting NODE."""
        req.files += [item.path for item in self._entries(ctx, node)]

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """A create or update per file whose content or mode differs (validate allows one entry per path)."""
        return [file_change(self.name, node, item.path, facts.files.get(item.path), item.content, phase=self.phase)
                for item in self._entries(ctx, node)]

    def converged(self, ctx: Context, node: str, facts: NodeFacts) -> None:
        """Each selected file as written."""
        for item in self._entries(ctx, node):
            facts.files[item.path] = file_fact(item.content)
