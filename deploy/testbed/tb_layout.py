"""The layout of one testbed: its names, addresses and paths, its state file (state.json) and its lock."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tb_base import TestbedError

BASE = Path(os.environ.get("RECONCILER_TESTBED_BASE", "/var/lib/reconciler-testbed"))
DEFAULT_NAME = "testbed"
DEFAULT_SUBNET = "10.250.0"
GPUS_PER_NODE = 8
NODE_CPUS = 16
NODE_MEMORY_MB = 64000
MAX_NODES = 200  # the full profile (supervisord, munge, Slurm; every node binds every node's root)
MAX_LIGHT_NODES = 4000  # the light profile (sshd only), on the wide address plan
NARROW_MAX = 200  # up to this many compute nodes: one /24 (ctl .1, gpuNN .10+N, bridge .254)
WIDE_PREFIX = 20  # beyond: a /20 from A.B.C.0 (C a multiple of 16), addresses numbered on through it


ACCOUNTING_PASS_FILE = "slurmdbd.pass"
TESTBED_LIB = "/usr/lib/reconciler-testbed"  # node-only helper scripts (and NODE_PYLIB below it)


NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")
SUBNET_RE = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")


@dataclass
class Layout:
    """Names, addresses and paths of one testbed."""

    name: str = DEFAULT_NAME
    computes: int = 4
    subnet: str = DEFAULT_SUBNET
    bare: bool = False
    configless: bool = False
    light: bool = False
    accounting: bool = False
    packages: bool = False
    slurm: str = ""  # Slurm release of the nodes (slurm_root.RELEASES); '' in state files older than --slurm
    lower: str = "/"  # the nodes' lower layer: / or the release's built root
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> Path:
        """The testbed's state directory."""
        return BASE / self.name

    @property
    def compute_nodes(self) -> list[str]:
        """gpu01..gpuNN."""
        width = max(2, len(str(self.computes)))
        return [f"gpu{i:0{width}d}" for i in range(1, self.computes + 1)]

    @property
    def nodes(self) -> list[str]:
        """All nodes, controller first."""
        return ["ctl", *self.compute_nodes]

    @property
    def admin_ns(self) -> str:
        """The namespace holding the bridge."""
        return f"{self.name}-admin"

    def ns(self, node: str) -> str:
        """Network namespace name of a node."""
        return f"{self.name}-{node}"

    @property
    def prefixlen(self) -> int:
        """Prefix length of the testbed's network: /24 up to NARROW_MAX compute nodes, else /20."""
        return address_plan(self.computes)

    def ip(self, node: str) -> str:
        """IPv4 address of a node (ctl .1, gpuNN .10+N, numbered on through the /20 when wide)."""
        return node_address(self.subnet, self.computes, node)

    @property
    def bridge_ip(self) -> str:
        """Address of the bridge in the admin namespace: .254 of the network's last /24."""
        return offset_address(self.subnet, (1 << (32 - self.prefixlen)) - 2)

    @property
    def cidr(self) -> str:
        """The testbed's network, e.g. 10.250.0.0/24."""
        return f"{self.subnet}.0/{self.prefixlen}"

    def marker(self, node: str) -> str:
        """Exact value of RECONCILER_TESTBED in a node's PID 1 environment."""
        return f"{self.name}/{node}"

    def node_dir(self, node: str) -> Path:
        """Directory with the node's upper, work and root (merged) directories."""
        return self.state / "nodes" / node

    @property
    def ssh_config(self) -> Path:
        """ssh_config with one Host entry per node."""
        return self.state / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        """known_hosts with every node's host key."""
        return self.state / "known_hosts"

    @property
    def identity(self) -> Path:
        """Private key that logs in as root on every node."""
        return self.state / "id_ed25519"

    @property
    def desired_state(self) -> Path:
        """The desired-state directory written by up."""
        return self.state / "desired-state"

    @property
    def accounting_pass(self) -> Path:
        """File holding the database password of slurmdbd (--accounting)."""
        return self.state / ACCOUNTING_PASS_FILE

    def save(self) -> None:
        """Write state.json atomically."""
        tmp = self.state / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, self.state / "state.json")

    @classmethod
    def load(cls, name: str) -> Layout | None:
        """Read a testbed's state.json, or None when there is none."""
        path = BASE / name / "state.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(**data)


def address_plan(computes: int) -> int:
    """Prefix length for a testbed of COMPUTES compute nodes (24 keeps today's addresses for small ones)."""
    return 24 if computes <= NARROW_MAX else WIDE_PREFIX


def offset_address(subnet: str, offset: int) -> str:
    """The address OFFSET places after A.B.C.0 (offsets past 255 carry into the third octet)."""
    a, b, c = (int(x) for x in subnet.split("."))
    return f"{a}.{b}.{c + offset // 256}.{offset % 256}"


def node_address(subnet: str, computes: int, node: str) -> str:
    """Address of NODE: ctl at offset 1, gpuN at offset 10+N (the same on both plans; /24 or /20)."""
    return offset_address(subnet, 1 if node == "ctl" else 10 + int(node[3:]))


def validate_layout(layout: Layout) -> None:
    """Reject names, subnets and sizes the testbed cannot handle."""
    if not NAME_RE.match(layout.name):
        raise TestbedError(f"bad name {layout.name!r}: 1-12 characters, [a-z][a-z0-9]*")
    m = SUBNET_RE.match(layout.subnet)
    if not m or any(int(x) > 255 for x in m.groups()):
        raise TestbedError(f"bad subnet {layout.subnet!r}: give three octets, e.g. 10.250.0")
    limit = MAX_LIGHT_NODES if layout.light else MAX_NODES
    if not 1 <= layout.computes <= limit:
        more = "" if layout.light else f" (up to {MAX_LIGHT_NODES} with --light)"
        raise TestbedError(f"--nodes must be between 1 and {limit}{more}")
    third = int(m.group(3))
    if layout.prefixlen < 24 and third % (1 << (24 - layout.prefixlen)):
        raise TestbedError(f"{layout.computes} compute nodes need a /{layout.prefixlen}: the subnet's third "
                           f"octet must be a multiple of {1 << (24 - layout.prefixlen)} "
                           f"(e.g. {m.group(1)}.{m.group(2)}.{third - third % 16}), got {layout.subnet}")


@contextlib.contextmanager
def locked(name: str, remove: bool = False) -> Iterator[None]:
    """Serialise up/down of one testbed; with REMOVE, delete the lock file (and an empty BASE) after."""
    BASE.mkdir(parents=True, exist_ok=True)
    lock = BASE / f".{name}.lock"
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
        if remove:
            lock.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                BASE.rmdir()
