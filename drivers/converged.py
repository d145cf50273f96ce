"""Facts of a cluster that already matches a desired state, synthesised from the rendered files (no SSH).

For planning without a cluster: the scale benchmark (`bench/scale.py`) and tests that plan against a
converged cluster and then make parts of it drift. A drivers module, not the engine's: it knows the kinds (the
Slurm files, services and node states); a new kind says what its converged node holds itself (`converged`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from reconciler.common import hostlist
from reconciler.desired.inventory import node_specs, slurm_nodes
from reconciler.engine.context import Context
from reconciler.engine.driver import Driver
from reconciler.facts.models import ClusterFacts, FileFact, MountFact, NodeFacts, ServiceFact, SlurmNodeFact, StatFact
from reconciler.render import managed_files_for, render_file
from reconciler.render.files import file_path


def file_fact(content: str, mode: str = "0644") -> FileFact:
    """What the gathering script reports for a file with this content."""
    return FileFact(exists=True, sha256=hashlib.sha256(content.encode()).hexdigest(), mode=mode, owner="root",
                    group="root", size=len(content), content=content)


def converged_facts(ctx: Context, drivers: Sequence[Driver] | None = None) -> ClusterFacts:
    """Facts of a cluster that matches the desired state: every managed file as rendered, mounts, images, and what
    each of DRIVERS (default: all) says of its own things (`converged`)."""
    from reconciler.drivers import all_drivers  # the registry imports every driver module: not at import time

    drivers = all_drivers() if drivers is None else drivers
    state = ctx.state
    facts = ClusterFacts(controller=ctx.controller)
    shared: dict[str, FileFact] = {}
    for name in node_specs(state):
        node = NodeFacts(node=name, reachable=True, slurm_version=state.cluster.slurm_version)
        for managed in managed_files_for(state, name):
            path = file_path(state, managed)
            if managed in ("slurm.conf", "gres.conf", "cgroup.conf"):
                if managed not in shared:
                    shared[managed] = file_fact(render_file(state, name, managed, ctx.source))
                node.files[path] = shared[managed]
            else:
                node.files[path] = file_fact(render_file(state, name, managed, ctx.source))
        for mount in state.storage.mounts:
            if name in hostlist.expand_set(mount.nodes):
                node.mounts.append(MountFact(source=mount.source, mountpoint=mount.mountpoint, fstype="nfs",
                                             options=["rw"]))
        for patch in state.patches:
            if patch.content is not None and name in hostlist.expand_set(patch.nodes):
                node.files[patch.path] = file_fact(patch.content, patch.mode or "0755")
        for image in state.images:
            if image.import_on == name:
                node.stats[image.path] = StatFact(exists=True, size=4096, mtime=1)
        node.services = {s: ServiceFact(name=s, running=True) for s in ("munge", "slurmd", "slurmctld")}
        for driver in drivers:
            driver.converged(ctx, name, node)
        facts.nodes[name] = node
    for name in slurm_nodes(state):
        facts.slurm_nodes[name] = SlurmNodeFact(name=name, state="IDLE")
    return facts
