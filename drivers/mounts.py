"""Driver for client mounts: the managed block of /etc/fstab, then each mount checked in /proc/mounts."""

from __future__ import annotations

import shlex

from reconciler.common import hostlist
from reconciler.drivers import mountpoints
from reconciler.drivers.blocks import block_change
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import Op, RunCommand
from reconciler.engine.plan import Change
from reconciler.engine.undo import Restore
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, MountFact, NodeFacts
from reconciler.model import Mount
from reconciler.model.values import fstab_unescape, lustre_source_key
from reconciler.render.blocks import BlockError, block_body
from reconciler.render.storage import fstab_block

FSTAB = "/etc/fstab"


def _source_key(source: str, fstype: str) -> str:
    """A source as the kernel reports it (Lustre: `@tcp0` reads back as `@tcp`)."""
    return lustre_source_key(source) if fstype == "lustre" else source.rstrip("/")


def mounted(mounts: list[MountFact], mount: Mount) -> bool:
    """True when /proc/mounts shows the mountpoint with the wanted source (fstype is not trusted)."""
    want = _source_key(mount.source, mount.type)
    return any(m.mountpoint == mount.mountpoint and _source_key(m.source, mount.type) == want for m in mounts)


def _old_mountpoints(content: str | None) -> list[tuple[str, str]]:
    try:
        body = block_body(content or "") or []
    except BlockError:
        return []
    return [(fstab_unescape(f[0]), fstab_unescape(f[1])) for f in (line.split() for line in body)
            if len(f) >= 2 and not f[0].startswith("#")]


class MountsDriver(DriverDefaults):
    """Writes the fstab block, mounts what is missing, unmounts what left the block (and removes the empty mount
    points it created for it: drivers/mountpoints.py)."""

    name = "mounts"
    phase = phase_of("mounts")

    def _mounts(self, ctx: Context, node: str) -> list[Mount]:
        return [m for m in ctx.state.storage.mounts if node in hostlist.expand_set(m.nodes)]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Ask for /etc/fstab and the mount table."""
        req.files.append(FSTAB)
        req.python["mountinfo"] = "stdout = open('/proc/self/mountinfo').read()"  # in the fact script: no process
        req.python[mountpoints.FACTS_KEY] = mountpoints.fact_snippet()

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """The mount points this driver created on NODE (and whether they are empty)."""
        mountpoints.absorb(cluster, node, facts, commands)

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """The fstab block change, then one change per mount that is missing or no longer wanted."""
        fact = facts.files.get(FSTAB)
        changes = [block_change(self.name, node, FSTAB, fact, fstab_block(ctx.state.storage, node),
                                phase=self.phase)]
        wanted = self._mounts(ctx, node)
        ours = mountpoints.created(ctx, node)
        for mount in wanted:
            resource = f"mount {mount.mountpoint}"
            if mounted(facts.mounts, mount):
                changes.append(Change(node=node, driver=self.name, resource=resource, action="ok",
                                      phase=self.phase + 1))
                continue
            mp = shlex.quote(mount.mountpoint)
            what = f"mount {mount.source} on {mount.mountpoint}"  # names the mount in a failure's record
            changes.append(Change(
                node=node, driver=self.name, resource=resource, action="create", phase=self.phase + 1,
                summary=what,
                ops=[RunCommand(command=f"{mountpoints.make_command(mount.mountpoint)} && mount {mp}",
                                description=what)],
                restore=_unmount_restore(mount.mountpoint, created_now=mount.mountpoint not in ours),
            ))
        wanted_points = {m.mountpoint for m in wanted}
        for source, point in _old_mountpoints(fact.content if fact else None):
            if point in wanted_points:
                continue
            if any(m.mountpoint == point and m.source.rstrip("/") == source.rstrip("/") for m in facts.mounts):
                mp = shlex.quote(point)
                ops: list[Op] = [RunCommand(command=f"umount {mp}", description=f"umount {point}")]
                if point in ours:  # a directory we created for the mount: removed too, if empty once unmounted
                    ops.append(RunCommand(command=mountpoints.remove_command(point),
                                          description=f"remove the empty mount point {point}"))
                wanted_points.add(point)
                changes.append(Change(
                    node=node, driver=self.name, resource=f"mount {point}", action="delete", phase=self.phase - 1,
                    summary=f"unmount {source} from {point} (removed from the desired state)", ops=ops,
                    restore=Restore(summary=f"mounted {source} on {point} again", check=f"mountpoint -q {mp}",
                                    ops=[RunCommand(command=f"{mountpoints.make_command(point)} && mount {mp}",
                                                    description=f"mount {point}")]),
                ))
        changes += mountpoints.removals(node, ours, wanted_points, self.name, self.phase + 1)
        return changes


def _unmount_restore(point: str, created_now: bool, record: str = mountpoints.RECORD) -> Restore:
    """The before-image of a mount that was not there: unmounted, and when the apply created its directory (it
    was not ours before and the record names it now), that directory removed if empty."""
    mp, rec = shlex.quote(point), shlex.quote(record)
    if not created_now:
        return Restore(summary=f"unmounted {point} (not mounted before)", check=f"! mountpoint -q {mp}",
                       ops=[RunCommand(command=f"umount {mp}", description=f"umount {point}")])
    recorded = f"grep -qxF -- {mp} {rec} 2>/dev/null"
    return Restore(
        summary=f"unmounted {point} (not mounted before); its directory, created by the apply, removed if empty",
        check=f"! mountpoint -q {mp} && ! {recorded}",
        ops=[RunCommand(command=f"{{ ! mountpoint -q {mp} || umount {mp}; }} && "
                                f"{{ ! {recorded} || {{ {mountpoints.remove_command(point, record)}; }}; }}",
                        description=f"umount {point}, remove the mount point the apply created")])
