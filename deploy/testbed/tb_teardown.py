"""Tearing a testbed down: every process killed by PID, then unmounted, namespaces and state deleted."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time

from tb_base import TestbedError, trace
from tb_layout import Layout
from tb_mounts import mountpoints, unmount_state
from tb_net import network_down, testbed_netns
from tb_nodes import environ_marker, node_alive, pid_alive


def _ns_inode(path: str) -> tuple[int, int] | None:
    """(dev, inode) of a namespace file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def testbed_pids(layout: Layout) -> set[int]:
    """Every process of the testbed: node PID 1s (exact marker) and anything in its namespaces."""
    nets = {i for i in (_ns_inode(f"/run/netns/{ns}") for ns in testbed_netns(layout.name)) if i}
    mnts: set[tuple[int, int]] = set()
    pids = set()
    for node in layout.nodes:
        if node_alive(layout, node):
            pids.add(layout.pids[node])
            for kind in ("mnt", "pid"):
                ino = _ns_inode(f"/proc/{layout.pids[node]}/ns/{kind}")
                if ino:
                    mnts.add(ino)
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        marker = environ_marker(pid)
        ours = marker is not None and marker.split("/", 1)[0] == layout.name
        if ours or _ns_inode(f"/proc/{pid}/ns/net") in nets or any(
                _ns_inode(f"/proc/{pid}/ns/{kind}") in mnts for kind in ("mnt", "pid")):
            pids.add(pid)
    return pids


def kill_all(pids: set[int], timeout: float = 10) -> set[int]:
    """SIGKILL PIDs and wait until they are gone; return the survivors."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = {p for p in pids if pid_alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = {p for p in left if pid_alive(p)}
    return left


def teardown(layout: Layout) -> None:
    """Kill every testbed process by PID, then unmount, delete namespaces and the state directory."""
    for _ in range(3):
        pids = testbed_pids(layout)
        if not pids:
            break
        trace(f"killing {len(pids)} processes")
        left = kill_all(pids)
        trace("killed")
        if left:
            raise TestbedError(f"processes survive SIGKILL: {sorted(left)}")
    unmount_state(layout)
    trace("unmounted")
    network_down(layout)
    trace("namespaces deleted")
    prefix = str(layout.state) + "/"
    mounted = [m for m in mountpoints() if m.startswith(prefix)]
    if mounted:  # never delete through a mounted overlay
        raise TestbedError(f"still mounted, not deleting {layout.state}: {', '.join(mounted)}")
    if layout.state.exists():
        shutil.rmtree(layout.state)
    trace("state removed")
