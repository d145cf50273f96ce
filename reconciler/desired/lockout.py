"""What would cut the reconciler off from a node: refused at validate unless the entry says `allow_lockout: true`.

The reconciler reaches a node over SSH (sshd, its host keys, the SSH user's authorized_keys), runs its fact script
in python3, runs every command through `sudo -n` when the SSH user is not root, installs with the node's package
manager, and drains, reboots and resumes nodes through Slurm, whose daemons authenticate with munge. An entry of
`packages:`, `kernel:`, `services:` or `files:` that removes, stops or switches off one of those on a node it
selects is refused at its file:line, naming the nodes and what the reconciler would lose; `allow_lockout: true` on
the entry says it is meant (decommissioning, a move to another network stack). The lists are curated, not
exhaustive: docs/yaml-reference.md ("What would cut the reconciler off") gives each entry's reason.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import Literal

from reconciler.common import hostlist
from reconciler.desired.inventory import node_specs, slurm_node_set
from reconciler.desired.managed import selected
from reconciler.model import DesiredState, NodeSelection
from reconciler.model.kernel import sysfs_name

Problem = tuple[tuple[str | int, ...], str]
Who = Literal["all", "sudo", "munge", "ipv6", "apt", "dnf"]  # the nodes a need is a need on (_Nodes.needing)

OPT_IN = "if that is meant, say so with allow_lockout: true on this entry"
SSH = "the reconciler reaches every node over SSH"

# Package name (full match) -> what the reconciler loses when it is removed, and on which nodes.
PACKAGES: list[tuple[re.Pattern[str], str, Who]] = [
    (re.compile(r"openssh-server|openssh"), f"sshd: {SSH}", "all"),
    (re.compile(r"(lib)?python3(\.\d+)?(-minimal|-libs|-stdlib)?"),
     "python3: the reconciler's fact script runs in it on every plan", "all"),
    (re.compile(r"sudo|sudo-ldap"), "sudo: the reconciler's SSH user runs every command through `sudo -n`", "sudo"),
    (re.compile(r"munge|libmunge2|munge-libs"), "munge: Slurm authenticates with it (AuthType auth/munge), and the "
     "reconciler drains, reboots and resumes nodes through Slurm", "munge"),
    (re.compile(r"apt|dpkg"), "the package manager the reconciler installs packages with", "apt"),
    (re.compile(r"dnf|rpm|python3-dnf"), "the package manager the reconciler installs packages with", "dnf"),
    (re.compile(r"ifupdown2?|netplan\.io|network-manager|NetworkManager|iproute2?|systemd-networkd"),
     f"what brings the network up: {SSH}", "all"),
]

# Service (systemd unit without `.service`, or supervisord program) -> what stopping or disabling it loses.
SERVICES: dict[str, tuple[str, Who]] = {
    **dict.fromkeys(("ssh", "sshd", "ssh.socket", "sshd.socket"), (f"sshd: {SSH}", "all")),
    "munge": ("munge: Slurm authenticates with it, and the reconciler drains, reboots and resumes nodes through "
              "Slurm", "munge"),
    **dict.fromkeys(("networking", "network", "NetworkManager", "systemd-networkd"),
                    (f"the node's network: {SSH}", "all")),
}

# Kernel modules (sysfs spelling) that carry a node's network: NIC drivers of common servers, clouds and VMs,
# IP over InfiniBand, and the stack under them. Blacklisting one also unloads it (with --allow driver-reload).
NETWORK_MODULES = frozenset(sysfs_name(m) for m in (
    "e1000", "e1000e", "igb", "igc", "ixgbe", "ixgbevf", "i40e", "iavf", "ice", "mlx4_core", "mlx4_en", "mlx5_core",
    "bnxt_en", "bnx2", "bnx2x", "tg3", "r8169", "be2net", "qede", "qed", "sfc", "cxgb4", "nfp", "ionic", "enic",
    "atlantic", "ena", "gve", "virtio", "virtio_pci", "virtio_net", "vmxnet3", "hv_netvsc", "xen-netfront",
    "ib_core", "ib_ipoib", "mlx4_ib", "mlx5_ib", "bonding", "8021q", "af_packet"))

_ARP_IGNORE = re.compile(r"net\.ipv4\.conf\.[^.]+\.arp_ignore")
_DISABLE_IPV6 = re.compile(r"net\.ipv6\.conf\.[^.]+\.disable_ipv6")


def _sysctl_loss(key: str, value: str) -> tuple[str, Who] | None:
    """What setting KEY to VALUE loses, or None. The kernel's Documentation/networking/ip-sysctl.rst: arp_ignore 8
    is "do not reply for all local addresses" (the maximum of conf/all and conf/IFACE applies); disable_ipv6 1
    removes the interface's IPv6 addresses; admin-guide/sysctl/kernel.rst: modules_disabled "is a one-way toggle"
    (no module loads or unloads until the next boot)."""
    if _ARP_IGNORE.fullmatch(key) and value == "8":
        return "arp_ignore 8 answers no ARP request for any local address: the node is unreachable over IPv4", "all"
    if key == "kernel.modules_disabled" and value == "1":
        return ("modules_disabled 1 forbids loading any module until the next boot: the reconciler's module "
                "loads and driver reloads fail"), "all"
    if _DISABLE_IPV6.fullmatch(key) and value == "1":
        return "disable_ipv6 1 takes IPv6 away, and the reconciler reaches this node by its IPv6 address", "ipv6"
    return None


def _ipv6_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        return False


class _Nodes:
    """Which nodes each kind of need applies to."""

    def __init__(self, state: DesiredState) -> None:
        self.state = state
        self.specs = node_specs(state)
        # slurm.conf.5 (22.05, 23.11, 24.11): AuthType defaults to auth/munge, CredType to cred/munge; either needs it
        conf = state.cluster.slurm_conf
        auth = str(conf.get("AuthType") or "auth/munge").strip().lower()
        cred = str(conf.get("CredType") or "cred/munge").strip().lower()
        self.slurm = (slurm_node_set(state) | set(state.cluster.controller_names)) \
            if "auth/munge" in (auth, cred.replace("cred/", "auth/")) else frozenset()

    def needing(self, item: NodeSelection, who: Who) -> list[str]:
        """The nodes ITEM selects on which a need of kind WHO holds."""
        nodes = selected(self.state, item)
        if who == "sudo":
            return [n for n in nodes if self.specs[n].user != "root"]
        if who == "munge":
            return [n for n in nodes if n in self.slurm]
        if who == "ipv6":
            return [n for n in nodes if _ipv6_host(self.specs[n].host)]
        if who in ("apt", "dnf"):  # a node whose manager is not said may be either
            return [n for n in nodes if self.state.nodes[self.specs[n].entry].package_manager in (None, who)]
        return nodes


def _said(what: str, nodes: list[str], why: str) -> str:
    shown = hostlist.compress(nodes[:64]) + (f" and {len(nodes) - 64} more" if len(nodes) > 64 else "")
    return f"{what} cuts the reconciler off from {shown}: {why}; {OPT_IN}"


def _packages(state: DesiredState, nodes: _Nodes) -> Iterator[Problem]:
    for index, entry in enumerate(state.packages):
        if entry.allow_lockout:
            continue
        for name, spec in entry.packages.items():
            if spec.version != "absent":
                continue
            for pattern, why, who in PACKAGES:
                if pattern.fullmatch(name) and (on := nodes.needing(entry, who)):
                    yield ("packages", index, "packages", name), _said(f"removing {name}", on, why)
                    break


def _kernel(state: DesiredState, nodes: _Nodes) -> Iterator[Problem]:
    for index, module in enumerate(state.kernel.modules):
        name = sysfs_name(module.name)
        if module.allow_lockout or module.state != "blacklisted" or name not in (*NETWORK_MODULES, "ipv6"):
            continue
        if on := nodes.needing(module, "ipv6" if name == "ipv6" else "all"):
            what = ("it is IPv6, and the reconciler reaches this node by its IPv6 address" if name == "ipv6" else
                    f"it carries the network (a NIC driver or the stack under one), {SSH}")
            yield ("kernel", "modules", index, "state"), _said(
                f"blacklisting {module.name}", on, f"{what}; a blacklisted module that is loaded is unloaded")
    for index, entry in enumerate(state.kernel.sysctls):
        if entry.allow_lockout:
            continue
        for key, value in entry.values.items():
            loss = _sysctl_loss(key, value)
            if loss and (on := nodes.needing(entry, loss[1])):
                yield ("kernel", "sysctls", index, "values", key), _said(f"{key} = {value}", on, loss[0])


def _services(state: DesiredState, nodes: _Nodes) -> Iterator[Problem]:
    for index, service in enumerate(state.services):
        name = service.name.removesuffix(".service")
        if service.allow_lockout or name not in SERVICES:
            continue
        why, who = SERVICES[name]
        if service.state == "stopped" and (on := nodes.needing(service, who)):
            yield ("services", index, "state"), _said(f"stopping {service.name}", on, why)
        elif service.enabled is False and (on := nodes.needing(service, who)):
            yield ("services", index, "enabled"), _said(f"disabling {service.name}", on, f"at the next boot, {why}")


def _key_files(user: str) -> tuple[str, ...]:
    home = "/root" if user == "root" else f"/home/{user}"
    return f"{home}/.ssh/authorized_keys", f"{home}/.ssh/authorized_keys2"


def _file_loss(path: str) -> tuple[str, bool] | None:
    """What removing PATH loses on every node, and whether only for a non-root SSH user (sudoers)."""
    if path == "/etc/ssh/sshd_config":
        return "sshd reads its configuration from it (no sshd starts without it)", False
    if path.startswith("/etc/ssh/ssh_host_") and path.endswith("_key"):
        return "it is an sshd host key: sshd starts without it no more, or with a key the reconciler refuses", False
    if path == "/etc/sudoers":
        return "sudo reads it: the reconciler's SSH user runs every command through `sudo -n`", True
    return None


def _files(state: DesiredState, nodes: _Nodes) -> Iterator[Problem]:
    for index, item in enumerate(state.files):
        if item.allow_lockout or item.state != "absent":
            continue
        loss = _file_loss(item.path)
        if loss is not None:
            on = nodes.needing(item, "sudo" if loss[1] else "all")
            why = loss[0]
        else:
            on = [n for n in selected(state, item) if item.path in _key_files(nodes.specs[n].user)]
            why = f"it holds the key the reconciler logs in with ({SSH})"
        if on:
            yield ("files", index, "state"), _said(f"removing {item.path}", on, why)


def lockouts(state: DesiredState) -> list[Problem]:
    """Every entry that would cut the reconciler off from a node it selects, without allow_lockout."""
    if not (state.packages or state.kernel.modules or state.kernel.sysctls or state.services or state.files):
        return []
    nodes = _Nodes(state)
    return [*_packages(state, nodes), *_kernel(state, nodes), *_services(state, nodes), *_files(state, nodes)]
