"""Driver for slurm.conf, gres.conf and cgroup.conf: the same files on every Slurm node."""

from __future__ import annotations

from drivers.base import file_change
from reconciler.engine.context import Context, shared_render
from reconciler.engine.plan import Change
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import NodeFacts
from reconciler.render import managed_files_for
from reconciler.render.files import file_path
from reconciler.slurmconf import same_meaning, same_pairs

SLURM_FILES = ("slurm.conf", "gres.conf", "cgroup.conf")


class SlurmConfigDriver:
    """Keeps the Slurm configuration files in step with the desired state."""

    name = "slurm_config"
    phase = 30

    def files_for(self, ctx: Context, node: str) -> list[str]:
        """The Slurm files a node gets."""
        return [f for f in managed_files_for(ctx.state, node) if f in SLURM_FILES]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Ask for the content of the node's Slurm files and its Slurm version."""
        req.files += [file_path(ctx.state, f) for f in self.files_for(ctx, node)]
        if self.files_for(ctx, node):
            req.commands["slurm_version"] = "slurmd -V 2>/dev/null || slurmctld -V 2>/dev/null || sinfo -V"

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """A change per Slurm file whose content (header aside) or mode differs."""
        changes = []
        for name in self.files_for(ctx, node):
            path = file_path(ctx.state, name)
            desired = shared_render(ctx, node, name)
            changes.append(file_change(self.name, node, path, facts.files.get(path), desired,
                                       phase=self.phase, ignore_header=True,
                                       equivalent=same_meaning if name == "slurm.conf" else same_pairs))
        return changes
