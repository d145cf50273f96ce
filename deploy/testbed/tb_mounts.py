"""Mounts in the host namespace: the nodes' root overlays and the stand-in Lustre file systems, and unmounting."""

from __future__ import annotations

import contextlib

import node_init
from tb_layout import Layout

# Lustre file systems "served" by ctl (the MGS) for the mount.lustre stand-in: NAME -> tmpfs size.
LUSTRE_FILESYSTEMS = {"lustrefs": "256m"}
LUSTRE_MGS = "ctl"


def is_mountpoint(path: str) -> bool:
    """Whether PATH is a mount point in our mount namespace."""
    return any(m == path for m in mountpoints())


def mountpoints() -> list[str]:
    """Mount points of our mount namespace, in mount order."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            out.append(line.split()[4].replace("\\040", " "))
    return out


def mount_roots(layout: Layout) -> None:
    """Mount each node's root overlay in the host namespace (before any node starts, so all see all)."""
    current = set(mountpoints())
    for node in layout.nodes:
        d = layout.node_dir(node)
        if str(d / "root") in current:
            continue
        opts = f"lowerdir={layout.lower},upperdir={d / 'upper'},workdir={d / 'work'}"
        node_init.mount(f"{node}:/", str(d / "root"), "overlay", 0, opts)


def mount_lustre(layout: Layout) -> None:
    """Mount the stand-in Lustre file systems: one tmpfs per fs name, named `<ctl IP>@tcp:/<fsname>`.

    Mounted in the host namespace before any node starts; every node gets them (recursive bind) under
    /run/reconciler-testbed/lustre/<MGS node>/<fsname>, where the mount.lustre stand-in binds them from.
    A bind keeps its file system's name, so /proc/self/mountinfo shows the Lustre source, as with Lustre.
    """
    current = set(mountpoints())
    for fsname, size in LUSTRE_FILESYSTEMS.items():
        target = layout.state / "lustre" / LUSTRE_MGS / fsname
        if str(target) in current:
            continue
        target.mkdir(parents=True, exist_ok=True)
        node_init.mount(f"{layout.ip(LUSTRE_MGS)}@tcp:/{fsname}", str(target), "tmpfs",
                        node_init.MS_NOSUID | node_init.MS_NODEV, f"size={size},mode=0755")


def unmount_state(layout: Layout) -> None:
    """Unmount everything mounted below the state directory, deepest first."""
    prefix = str(layout.state) + "/"
    for mp in sorted((m for m in mountpoints() if m.startswith(prefix)), key=len, reverse=True):
        with contextlib.suppress(OSError):
            node_init.umount2(mp, node_init.MNT_DETACH)
