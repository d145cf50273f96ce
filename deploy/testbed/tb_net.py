"""The testbed's network: an admin namespace with a bridge, one network namespace and veth per node."""

from __future__ import annotations

import contextlib
import os
import re
import sys

import node_init
from tb_base import TestbedError, run
from tb_layout import BASE, Layout
from tb_mounts import is_mountpoint


def netns_exists(name: str) -> bool:
    """Whether a named network namespace exists."""
    return os.path.exists(f"/run/netns/{name}")


def network_up(layout: Layout) -> None:
    """Create the admin namespace with its bridge, and one namespace plus veth per node."""
    if not netns_exists(layout.admin_ns):
        run(["ip", "netns", "add", layout.admin_ns])
    todo = [layout.ns(n) for n in layout.nodes if not netns_exists(layout.ns(n))]
    if todo:
        create_netns_from(layout.admin_ns, todo, no_ipv6=layout.light)
    batch = [] if _link_exists(layout.admin_ns, "br0") else [
        "link set lo up", "link add br0 type bridge", f"addr add {layout.bridge_ip}/{layout.prefixlen} dev br0",
        "link set br0 up"]
    for node in layout.nodes:
        if not _link_exists(layout.admin_ns, f"v-{node}"):
            batch += [f"link add v-{node} type veth peer name eth0 netns {layout.ns(node)}",
                      f"link set v-{node} master br0 up"]
    if batch:
        run(["ip", "-n", layout.admin_ns, "-batch", "-"], input="\n".join(batch) + "\n")


def create_netns_from(admin: str, names: list[str], no_ipv6: bool = False) -> None:
    """Create named network namespaces (like `ip netns add`) from inside the admin namespace.

    Namespaces created there get a small TCP hash table of their own (net.ipv4.tcp_child_ehash_entries
    is set in the admin namespace only), so reading a node's /proc/net/tcp costs microseconds instead of
    walking the host's table. NO_IPV6 turns IPv6 off in the new namespaces (light testbeds: hundreds of nodes
    sending router solicitations and MLD reports through one bridge is a flood, and nothing uses IPv6).
    """
    pid = os.fork()
    if pid == 0:  # child: never returns
        code = 1
        try:
            fd = os.open(f"/run/netns/{admin}", os.O_RDONLY)
            node_init.check(node_init.libc.setns(fd, node_init.CLONE_NEWNET), "setns")
            with contextlib.suppress(OSError), open("/proc/sys/net/ipv4/tcp_child_ehash_entries", "w") as f:
                f.write("1024\n")
            for name in names:
                node_init.check(node_init.libc.setns(fd, node_init.CLONE_NEWNET), "setns")
                node_init.check(node_init.libc.unshare(node_init.CLONE_NEWNET), "unshare")
                path = f"/run/netns/{name}"
                os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
                node_init.mount("/proc/self/ns/net", path, None, node_init.MS_BIND)
                for conf in ("all", "default") if no_ipv6 else ():
                    with contextlib.suppress(OSError), open(f"/proc/sys/net/ipv6/conf/{conf}/disable_ipv6",
                                                            "w") as f:
                        f.write("1\n")
            code = 0
        except BaseException as e:  # noqa: BLE001 - report from the forked child, then exit
            print(f"testbed: error: creating namespaces: {e}", file=sys.stderr)
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise TestbedError("could not create the nodes' network namespaces")


def _link_exists(ns: str, link: str) -> bool:
    """Whether a link exists in a namespace."""
    return run(["ip", "-n", ns, "link", "show", link], check=False).returncode == 0


def network_down(layout: Layout) -> None:
    """Delete every namespace of the testbed (their veths and bridge go with them)."""
    names = testbed_netns(layout.name)
    if names:
        run(["ip", "-batch", "-"], input="".join(f"netns del {ns}\n" for ns in names), check=False)
    with contextlib.suppress(OSError):
        if not os.listdir("/run/netns") and not other_testbeds(layout.name) and is_mountpoint("/run/netns"):
            node_init.umount2("/run/netns", node_init.MNT_DETACH)


def testbed_netns(name: str) -> list[str]:
    """Named network namespaces that belong to testbed NAME (exact pattern, no prefix matching)."""
    pattern = re.compile(rf"^{re.escape(name)}-(admin|ctl|gpu\d+)$")
    try:
        return sorted(n for n in os.listdir("/run/netns") if pattern.match(n))
    except FileNotFoundError:
        return []


def other_testbeds(name: str) -> list[str]:
    """Names of other testbeds with a state directory."""
    if not BASE.is_dir():
        return []
    return [p.name for p in BASE.iterdir() if p.is_dir() and p.name != name]
