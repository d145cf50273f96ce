"""Local testbed: a real multi-node Slurm cluster on one Linux machine (root, no Docker).

Each node is its own network namespace (a veth into a bridge that lives in a separate admin namespace, so
the host's own network is never touched), its own mount/UTS/IPC/PID namespaces, and a whole-root overlay
(lower layer: the host's ``/``; upper layer: the node's directory under the state dir) that it pivots into.
supervisord is PID 1 of every node and runs sshd, munged and slurmctld (on ``ctl``) or slurmd (on the
``gpuNN`` nodes); with ``--accounting`` also MariaDB and slurmdbd on ``ctl``. See README.md next to this file.
Standard library only: it runs before the project is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import desired_state  # noqa: E402  (sibling modules, path set above)
import modules_standin  # noqa: E402
import node_init  # noqa: E402
import package_repo  # noqa: E402
import pyxis_standin  # noqa: E402
import reboot  # noqa: E402
import slurm_root  # noqa: E402

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
PATH = node_init.PATH
NODE_PYTHON = "/usr/bin/python3"
NODE_PYLIB = node_init.NODE_PYLIB
DEBIAN_PACKAGES = ["openssh-server", "openssh-client", "munge", "slurmctld", "slurmd", "slurm-client",
                   "supervisor", "iproute2", "netcat-openbsd", "squashfs-tools", "nfs-kernel-server",
                   "python3-clustershell",  # ClusterShell for the nodes' python3: testbed nodes as gateways
                   "slurmdbd", "mariadb-server",  # `up --accounting`: slurmdbd and its MariaDB on ctl
                   "gcc", "libc6-dev", "libslurm-dev",  # `up` compiles the Pyxis stand-in (pyxis_standin.py)
                   # `up --packages`: the package repository (package_repo.py), Debian's dnf and rpm on the nodes
                   "dnf", "dnf-plugins-core", "rpm", "createrepo-c", "dpkg-dev", "gnupg",
                   "debootstrap"]  # `up --slurm R`: the root of the release the host does not have (slurm_root.py)
# Not for the nodes: what the tests use beside the testbed (the status page in a headless browser, promtool for
# the alert rules, systemd-analyze for the unit, sudo and visudo for the shipped sudoers rule).
TEST_PACKAGES = ["chromium", "prometheus", "systemd", "sudo"]
REQUIRED_BINARIES = ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen", "/usr/sbin/munged",
                     "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sinfo", "/usr/bin/supervisord",
                     "/usr/sbin/ip", "/usr/bin/nc", "/usr/bin/mksquashfs", "/usr/sbin/exportfs",
                     "/usr/bin/nsenter", NODE_PYTHON]
PACKAGES_BINARIES = ["/usr/bin/dpkg-scanpackages", "/usr/bin/createrepo_c", "/usr/bin/rpmbuild", "/usr/bin/gpg",
                     "/usr/bin/dnf"]
HOST_BINARIES = ["/usr/bin/ssh", "/usr/bin/ssh-keygen", "/usr/sbin/ip", "/usr/bin/nc", "/usr/bin/nsenter",
                 NODE_PYTHON, "/usr/sbin/debootstrap"]  # what the host runs itself, whichever release the nodes run
ACCOUNTING_BINARIES = ["/usr/sbin/slurmdbd", "/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db",
                       "/usr/bin/mariadb-admin", "/usr/bin/sacctmgr"]
PORT_SSH, PORT_SLURMCTLD, PORT_SLURMD, PORT_SLURMDBD, PORT_MARIADB = 22, 6817, 6818, 6819, 3306
# Unix users on every node of the full profile (same uid/gid everywhere, home in /home), so that tests can submit
# jobs as someone other than root (`su alice -c 'sbatch ...'` on ctl) and the jobs run as them on compute nodes.
TEST_USERS = {"alice": 2001, "bob": 2002}  # name -> uid, also the gid of the user's own group
# `up --accounting`: slurmdbd's database on ctl (MariaDB, datadir in ctl's upper layer), its user and where the
# generated password is kept (the state directory, mode 0600; also in ctl's /etc/slurm/slurmdbd.conf).
ACCOUNTING_DB = "slurm_acct_db"
ACCOUNTING_DB_USER = "slurm"
ACCOUNTING_PASS_FILE = "slurmdbd.pass"
TESTBED_LIB = "/usr/lib/reconciler-testbed"  # node-only helper scripts (and NODE_PYLIB below it)
MARIADB_INIT_SQL = "/etc/mysql/reconciler-testbed-slurmdbd.sql"
# Lustre file systems "served" by ctl (the MGS) for the mount.lustre stand-in: NAME -> tmpfs size.
LUSTRE_FILESYSTEMS = {"lustrefs": "256m"}
LUSTRE_MGS = "ctl"
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")
SUBNET_RE = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")


class TestbedError(Exception):
    """A failure worth a one-line message, not a traceback."""


# The nodes' lower layer: the host's / or the built root of another Slurm release (slurm_root.py). Set once per
# process by use_lower() before any node file is written; every read of "the node's own files" goes through it.
_LOWER = [Path("/")]


def use_lower(path: Path) -> None:
    """Make PATH the lower layer that node files are mirrored from (modes, owners, users)."""
    _LOWER[0] = path
    _passwd.cache_clear()
    node_test_users.cache_clear()


def lower(rel: str) -> Path:
    """A path of the nodes' lower layer (REL relative to its root)."""
    return _LOWER[0] / rel.lstrip("/")


VERBOSE = os.environ.get("TESTBED_VERBOSE") == "1"
_T0 = time.monotonic()


def log(msg: str) -> None:
    """Progress message on stderr (stdout is kept for results)."""
    print(f"testbed: {msg}", file=sys.stderr, flush=True)


def trace(msg: str) -> None:
    """Timestamped phase message when TESTBED_VERBOSE=1."""
    if VERBOSE:
        log(f"[{time.monotonic() - _T0:6.2f}s] {msg}")


# --------------------------------------------------------------------------------------------- layout


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


# --------------------------------------------------------------------------------------------- helpers


def run(cmd: list[str], *, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing output; raise TestbedError with its stderr on failure."""
    proc = subprocess.run(cmd, input=input, text=True, capture_output=True)
    if check and proc.returncode != 0:
        raise TestbedError(f"{' '.join(cmd[:4])} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


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


def require_root_and_deps(accounting: bool = False, packages: bool = False, root: Path = Path("/")) -> None:
    """Fail early when not root or a needed binary is missing (ACCOUNTING: slurmdbd and MariaDB too; PACKAGES:
    the repository tools and the fetched Debian packages). The nodes' binaries are looked for in ROOT, their
    lower layer; the host needs its own ssh, ip, nc, nsenter and python3 whatever the release."""
    if os.geteuid() != 0:
        raise TestbedError("must run as root (namespaces, mounts)")
    needed = REQUIRED_BINARIES + (ACCOUNTING_BINARIES if accounting else []) + (PACKAGES_BINARIES if packages else [])
    missing = [b for b in needed if not (root / b.lstrip("/")).exists()]
    missing += [b for b in HOST_BINARIES if root != Path("/") and not os.path.exists(b)]
    if missing:
        raise TestbedError(f"missing {', '.join(missing)}: run `{HERE / 'testbed'} deps` first")
    if packages:
        try:
            package_repo.fetched_debs()
        except package_repo.RepoError as e:
            raise TestbedError(str(e)) from e


# --------------------------------------------------------------------------------------------- node files


def _mirror_mkdir(upper: Path, rel: str) -> Path:
    """Create UPPER/REL, giving each new directory the mode and owner of the host's directory."""
    cur, host = upper, _LOWER[0]
    for part in Path(rel).parts:
        cur, host = cur / part, host / part
        if cur.is_dir():
            continue
        cur.mkdir()
        st = os.stat(host) if host.is_dir() else None
        os.chmod(cur, stat.S_IMODE(st.st_mode) if st else 0o755)
        if st:
            os.chown(cur, st.st_uid, st.st_gid)
    return cur


def put(upper: Path, rel: str, data: str | bytes, mode: int = 0o644, owner: tuple[int, int] = (0, 0)) -> None:
    """Write a file into a node's upper layer."""
    parent = _mirror_mkdir(upper, str(Path(rel).parent))
    path = parent / Path(rel).name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)
    os.chown(path, *owner)


def whiteout(upper: Path, rel: str) -> None:
    """Hide a host path from the node (overlay whiteout)."""
    parent = _mirror_mkdir(upper, str(Path(rel).parent))
    os.mknod(parent / Path(rel).name, stat.S_IFCHR, os.makedev(0, 0))


def opaque_dir(upper: Path, rel: str, mode: int, owner: tuple[int, int] = (0, 0)) -> None:
    """Make a directory whose host content is hidden from the node."""
    path = _mirror_mkdir(upper, rel)
    os.setxattr(path, "trusted.overlay.opaque", b"y")
    os.chmod(path, mode)
    os.chown(path, *owner)


@functools.lru_cache(maxsize=4)
def _passwd(rel: str) -> tuple[tuple[str, int, int], ...]:
    """(name, id, gid) of each line of the lower layer's etc/passwd or etc/group (gid: 0 for groups)."""
    entries = []
    with contextlib.suppress(OSError):
        for line in lower(rel).read_text(errors="replace").splitlines():
            f = line.split(":")
            if len(f) >= 3 and f[2].isdigit():
                entries.append((f[0], int(f[2]), int(f[3]) if rel == "etc/passwd" and f[3].isdigit() else 0))
    return tuple(entries)


def _ids(user: str) -> tuple[int, int]:
    """uid and gid of a user of the nodes' lower layer (the host's users, or the built root's)."""
    for name, uid, gid in _passwd("etc/passwd"):
        if name == user:
            return uid, gid
    raise TestbedError(f"no user {user} in {lower('etc/passwd')}")


def hosts_file(layout: Layout) -> str:
    """/etc/hosts of every node: all node names on their testbed addresses."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", ""]
    lines += [f"{layout.ip(n)}\t{n}" for n in layout.nodes]
    return f"# written by deploy/testbed for testbed {layout.name}\n" + "\n".join(lines) + "\n"


def sshd_config() -> str:
    """sshd_config of a node: own host key, key-only root login."""
    return """# written by deploy/testbed: key-only root login, this node's own host key
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 100:30:200
MaxSessions 100
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def _program(name: str, command: str, *, autostart: bool = True, user: str = "", priority: int = 50,
             startsecs: int = 1) -> str:
    """One supervisord [program:x] section."""
    lines = [f"[program:{name}]", f"command={command}", f"autostart={'true' if autostart else 'false'}",
             "autorestart=true", f"priority={priority}", f"startsecs={startsecs}", "stopwaitsecs=10",
             "redirect_stderr=true", f"stdout_logfile=/var/log/supervisor/{name}.log",
             "stdout_logfile_maxbytes=1MB", "stdout_logfile_backups=1"]
    if user:
        lines.append(f"user={user}")
    return "\n".join(lines) + "\n"


def supervisor_conf(layout: Layout, node: str) -> str:
    """supervisord programs of a node; Slurm daemons are defined but not started with --bare.

    With --configless a compute node's slurmd is not here but in CONFIGLESS_PROGRAM_PATH (see
    configless_program); with --bare --configless it is nowhere: the reconciler's apply writes that file.
    """
    wait_munge = "until [ -S /run/munge/munge.socket.2 ]; do sleep 0.1; done"
    daemon = "slurmctld" if node == "ctl" else "slurmd"
    parts = [f"; written by deploy/testbed for node {node} of testbed {layout.name}\n",
             _program("munge", "/usr/sbin/munged -F", user="munge", priority=10, startsecs=0),
             _program("sshd", "/usr/sbin/sshd -D -e", priority=20, startsecs=0)]
    accounting = layout.accounting and node == "ctl"
    if accounting:  # MariaDB (as user mysql), then slurmdbd (as root: it drops to SlurmUser, like its unit)
        parts.append(_program("mariadb", f"/bin/sh {TESTBED_LIB}/mariadb-start", user="mysql", priority=15))
        parts.append(_program("slurmdbd", f"/bin/sh {TESTBED_LIB}/slurmdbd-start", priority=25))
    if layout.packages and node == "ctl":  # the package repository (package_repo.py), on the testbed network
        parts.append(_program("packages", package_repo.http_command(layout.ip("ctl")), priority=20, startsecs=0))
    if node == "ctl" or not layout.configless:
        register = f"{TESTBED_LIB}/register-cluster; " if accounting else ""
        parts.append(_program(daemon, f"/bin/sh -c '{wait_munge}; {register}exec /usr/sbin/{daemon} -D'",
                              autostart=not layout.bare, priority=30))
    return "\n".join(parts)


# `up --accounting`, on ctl. MariaDB runs as user mysql; its datadir is in ctl's upper layer (/var/lib/mysql is an
# opaque directory there, the host's is hidden). `up` initialises it from the host, through ctl's mounted root,
# while the nodes start (init_mariadb_datadir: mariadb-install-db takes over a second, about as long as
# supervisord waits before it starts its programs), and marks it ready with MARIADB_READY; the init file (run by
# every start, before connections are served) creates slurmdbd's database and user with the testbed's password.
MARIADB_DATADIR = "/var/lib/mysql"
MARIADB_READY = ".reconciler-testbed-initialised"
MARIADB_CNF_PATH = "/etc/mysql/mariadb.conf.d/90-reconciler-testbed.cnf"
MARIADB_START = f"""#!/bin/sh
# mariadbd of testbed node ctl (written by deploy/testbed): wait until `up` has initialised the datadir, then run.
until [ -e {MARIADB_DATADIR}/{MARIADB_READY} ]; do sleep 0.05; done
exec /usr/sbin/mariadbd --init-file={MARIADB_INIT_SQL}
"""

# Small and quick: a test database, not a production one (small buffer pool and redo log, no doublewrite, the
# log flushed once a second). slurmdbd logs `error: Database settings not recommended values:
# innodb_buffer_pool_size innodb_log_file_size` for it at start, harmlessly.
MARIADB_CNF = """# written by deploy/testbed: MariaDB for the testbed's slurmdbd (test data: fast, not durable)
[mysqld]
skip-name-resolve
bind-address = 127.0.0.1
innodb_buffer_pool_size = 16M
innodb_log_file_size = 16M
innodb_lock_wait_timeout = 900
innodb_flush_log_at_trx_commit = 2
innodb_doublewrite = 0
innodb_autoextend_increment = 8
innodb_log_buffer_size = 2M
key_buffer_size = 1M
aria_pagecache_buffer_size = 1M
max_connections = 32
"""

SLURMDBD_START = """#!/bin/sh
# slurmdbd of testbed node ctl (written by deploy/testbed): wait for munged and MariaDB, then run it (as root:
# slurmdbd drops to SlurmUser=slurm itself, as under Debian's systemd unit).
until [ -S /run/munge/munge.socket.2 ] && mariadb-admin ping >/dev/null 2>&1; do sleep 0.1; done
exec /usr/sbin/slurmdbd -D
"""

REGISTER_CLUSTER = """#!/bin/sh
# Run before slurmctld on testbed node ctl (written by deploy/testbed for --accounting): wait for slurmdbd and
# register the cluster in its database (`sacctmgr add cluster` also creates the root account and root's user
# association, so root can run jobs with AccountingStorageEnforce=associations). Nothing to do when slurm.conf
# does not use slurmdbd (e.g. after an apply of a desired state without accounting).
conf=/etc/slurm/slurm.conf
grep -qi '^AccountingStorageType=accounting_storage/slurmdbd' "$conf" || exit 0
name=$(sed -n 's/^ClusterName=//Ip' "$conf" | head -n 1)
until sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qix "$name" \\
        || sacctmgr -i add cluster "$name" >/dev/null 2>&1; do
    sleep 0.1
done
"""


def slurmdbd_conf(password: str) -> str:
    """/etc/slurm/slurmdbd.conf of ctl (--accounting): slurmdbd on ctl, MariaDB through its local socket."""
    return ("# slurmdbd.conf written by deploy/testbed (--accounting); owner slurm, mode 0600\n"
            "AuthType=auth/munge\nDbdHost=ctl\nDbdPort=6819\nSlurmUser=slurm\n"
            "StorageType=accounting_storage/mysql\nStorageHost=localhost\n"
            f"StorageUser={ACCOUNTING_DB_USER}\nStoragePass={password}\nStorageLoc={ACCOUNTING_DB}\n"
            "LogFile=/var/log/slurm/slurmdbd.log\nPidFile=/run/slurmdbd.pid\n")


def mariadb_init_sql(password: str) -> str:
    """SQL run by every mariadbd start (--init-file; one statement a line): slurmdbd's database and user."""
    user = f"'{ACCOUNTING_DB_USER}'@'localhost'"
    return (f"CREATE DATABASE IF NOT EXISTS {ACCOUNTING_DB};\n"
            f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{password}';\n"
            f"ALTER USER {user} IDENTIFIED BY '{password}';\n"
            f"GRANT ALL ON {ACCOUNTING_DB}.* TO {user};\n")


def accounting_password(layout: Layout) -> str:
    """slurmdbd's database password: made once per testbed, kept in <state>/slurmdbd.pass (mode 0600)."""
    path = layout.accounting_pass
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(os.urandom(12).hex() + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    return path.read_text().strip()


def install_accounting(upper: Path, password: str) -> None:
    """ctl with --accounting: slurmdbd.conf, MariaDB's config, init SQL and empty datadir, the start scripts."""
    put(upper, "etc/slurm/slurmdbd.conf", slurmdbd_conf(password), 0o600, _ids("slurm"))
    mysql = _ids("mysql")
    opaque_dir(upper, MARIADB_DATADIR.lstrip("/"), 0o755, mysql)
    put(upper, MARIADB_CNF_PATH.lstrip("/"), MARIADB_CNF)
    put(upper, MARIADB_INIT_SQL.lstrip("/"), mariadb_init_sql(password), 0o600, mysql)
    for name, text in (("mariadb-start", MARIADB_START), ("slurmdbd-start", SLURMDBD_START),
                       ("register-cluster", REGISTER_CLUSTER)):
        put(upper, f"{TESTBED_LIB.lstrip('/')}/{name}", text, 0o755)


def init_mariadb_datadir(layout: Layout) -> None:
    """Initialise ctl's MariaDB datadir from the host, through ctl's mounted root, then mark it ready.

    The bootstrap server runs as root (the state directory is closed to user mysql), so the files are given
    to mysql afterwards; mariadb-start in the node waits for the MARIADB_READY mark.
    """
    root = layout.node_dir("ctl") / "root"
    datadir = root / MARIADB_DATADIR.lstrip("/")
    if (datadir / MARIADB_READY).exists():
        return
    if layout.lower == "/":
        run(["mariadb-install-db", f"--defaults-extra-file={root}{MARIADB_CNF_PATH}", "--user=root",
             f"--datadir={datadir}", "--skip-test-db", "--auth-root-authentication-method=socket",
             "--auth-root-socket-user=root"])
    else:  # the release's own MariaDB, in ctl's root (a private mount namespace gives it /dev and /proc)
        install = shlex.join(["chroot", str(root), "mariadb-install-db", f"--defaults-extra-file={MARIADB_CNF_PATH}",
                              "--user=root", f"--datadir={MARIADB_DATADIR}", "--skip-test-db",
                              "--auth-root-authentication-method=socket", "--auth-root-socket-user=root"])
        run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
             f"mount --rbind /dev {shlex.quote(str(root / 'dev'))} && "
             f"mount -t proc proc {shlex.quote(str(root / 'proc'))} && exec {install}"])
    uid, gid = _ids("mysql")
    os.chown(datadir, uid, gid)
    for top, dirs, files in os.walk(datadir):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(top, name), uid, gid)
    put(root, f"{MARIADB_DATADIR.lstrip('/')}/{MARIADB_READY}", "", 0o644, (uid, gid))


@functools.lru_cache(maxsize=1)
def node_test_users() -> dict[str, int]:
    """TEST_USERS less any whose name or ids the host already uses otherwise (left out with a warning, once: the
    host's files are every node's lower layer, and a clash must not stop testbeds that do not need them)."""
    users = {}
    for name, uid in TEST_USERS.items():
        clash = [f"{what} {uid} is {e[0]}'s" for known, what in ((_passwd("etc/passwd"), "uid"),
                                                                 (_passwd("etc/group"), "gid"))
                 for e in known if (e[1] == uid) != (e[0] == name)]
        if clash:
            log(f"warning: test user {name} left out: on this host {', '.join(clash)}")
        else:
            users[name] = uid
    return users


def install_test_users(upper: Path) -> None:
    """node_test_users() on a node: the host's passwd/group/shadow plus their lines, and their home directories."""
    users = node_test_users()
    files = {"etc/passwd": (0o644, 0), "etc/group": (0o644, 0), "etc/shadow": (0o640, _shadow_gid())}
    for rel, (mode, gid) in files.items():
        lines = lower(rel).read_text().splitlines(keepends=True) if lower(rel).exists() else []
        names = {line.split(":", 1)[0] for line in lines}
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        for name, uid in users.items():
            if name in names:
                continue
            lines.append({"etc/passwd": f"{name}:x:{uid}:{uid}:testbed user {name}:/home/{name}:/bin/bash\n",
                          "etc/group": f"{name}:x:{uid}:\n",
                          "etc/shadow": f"{name}:*:20000:0:99999:7:::\n"}[rel])
        put(upper, rel, "".join(lines), mode, (0, gid))
    for name, uid in users.items():
        home = _mirror_mkdir(upper, f"home/{name}")
        os.chmod(home, 0o755)
        os.chown(home, uid, uid)


def _shadow_gid() -> int:
    """gid of group shadow (owner group of /etc/shadow), 0 where there is none."""
    try:
        return os.stat(lower("etc/shadow")).st_gid
    except OSError:
        return 0


CONFIGLESS_PROGRAM_PATH = "etc/supervisor/conf.d/slurmd.conf"


def configless_program(layout: Layout) -> str:
    """A configless compute node's slurmd program: byte for byte the body of what reconciler renders for
    `cluster.mode: configless` on a supervisord node (reconciler/render/configless.py), so adopting it is a
    no-op."""
    return ("[program:slurmd]\n"
            f"command=/usr/sbin/slurmd -D --conf-server ctl:{desired_state.SLURM_CONF['SlurmctldPort']}\n"
            "autostart=true\nautorestart=true\npriority=30\nstartsecs=1\nstartretries=10\nstopwaitsecs=10\n"
            "redirect_stderr=true\nstdout_logfile=/var/log/supervisor/slurmd.log\n"
            "stdout_logfile_maxbytes=1MB\nstdout_logfile_backups=1\n")


def slurm_conf(layout: Layout) -> str:
    """Minimal slurm.conf of a running testbed: one partition `debug` with all compute nodes.

    Parameters come from desired_state.SLURM_CONF, in the renderer's order, so adopting the testbed with
    its desired state changes little beyond what the desired state adds.
    """
    nodes = hostlist(layout.compute_nodes)
    params = "".join(f"{k}={v}\n" for k, v in desired_state.slurm_conf_params(layout.accounting).items())
    if layout.configless:
        params += "SlurmctldParameters=enable_configless\n"
    return (f"# slurm.conf written by deploy/testbed for testbed {layout.name} (minimal running cluster)\n"
            f"ClusterName={layout.name}\nSlurmctldHost=ctl\n{params}\n# Nodes\n"
            f"NodeName={nodes} CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} Gres=gpu:{GPUS_PER_NODE} "
            "State=UNKNOWN\n"
            f"\n# Partitions\nPartitionName=debug Nodes={nodes} Default=YES MaxTime=INFINITE State=UP\n")


def gres_conf(layout: Layout) -> str:
    """gres.conf: eight fake GPUs per compute node, backed by /dev/nvidia0..7."""
    return (f"# gres.conf written by deploy/testbed for testbed {layout.name}\n"
            f"NodeName={hostlist(layout.compute_nodes)} Name=gpu File=/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n")


def hostlist(names: list[str]) -> str:
    """Compress gpu01..gpuNN (one contiguous numbered run) to Slurm's gpu[01-NN]."""
    if len(names) == 1:
        return names[0]
    return f"gpu[{names[0][3:]}-{names[-1][3:]}]"


def prepare_node(layout: Layout, node: str, munge_key: bytes, client_pub: str, db_pass: str = "",
                 repo: package_repo.Repository | None = None) -> str:
    """Build the node's upper layer; return its public host key line (light nodes: SSH and hosts only)."""
    d = layout.node_dir(node)
    for sub in ("upper", "work", "root"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    upper = d / "upper"
    keyfile = d / "ssh_host_ed25519_key"
    if not keyfile.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node}", "-f", str(keyfile)])
    pub = (d / "ssh_host_ed25519_key.pub").read_text()
    put(upper, "etc/ssh/ssh_host_ed25519_key", keyfile.read_bytes(), 0o600)
    put(upper, "etc/ssh/ssh_host_ed25519_key.pub", pub)
    for kind in ("rsa", "ecdsa"):
        for suffix in ("", ".pub"):
            if os.path.lexists(lower(f"etc/ssh/ssh_host_{kind}_key{suffix}")):
                whiteout(upper, f"etc/ssh/ssh_host_{kind}_key{suffix}")
    put(upper, "etc/ssh/sshd_config", sshd_config())
    put(upper, "etc/hostname", node + "\n")
    put(upper, "etc/hosts", hosts_file(layout))
    put(upper, "etc/fstab", "# /etc/fstab of testbed node (written by deploy/testbed)\n")
    opaque_dir(upper, "root", 0o700)
    for dotfile in (".bashrc", ".profile", ".bash_logout"):
        if lower(f"etc/skel/{dotfile}").exists():
            put(upper, f"root/{dotfile}", lower(f"etc/skel/{dotfile}").read_bytes())
    opaque_dir(upper, "root/.ssh", 0o700)
    put(upper, "root/.ssh/authorized_keys", client_pub, 0o600)
    if layout.light:  # the client files at their host paths (bound by node_init): nodes can be SSH gateways
        opaque_dir(upper, str(BASE).lstrip("/"), 0o700)
        for path in client_file_binds(layout).values():
            put(upper, path.lstrip("/"), "", 0o600)
    elif os.path.lexists(lower(str(BASE))):
        whiteout(upper, str(BASE).lstrip("/"))
    host_key_line = f"{node},{layout.ip(node)} {' '.join(pub.split()[:2])}\n"
    if layout.light:  # sshd as the only daemon, started by node_init's light PID 1: no munge, Slurm, stand-ins
        # The Slurm files the desired state compares (no daemon reads them), and STAND-INS for the two Slurm
        # commands the reconciler asks the controller (an empty view: no daemon answers): a light cluster can
        # converge, so a no-op plan and a drift check exist at hundreds of nodes.
        put(upper, "etc/slurm/slurm.conf", slurm_conf(layout))
        put(upper, "etc/slurm/gres.conf", gres_conf(layout))
        for command in ("scontrol", "squeue"):
            put(upper, f"usr/local/bin/{command}", LIGHT_SLURM_STANDIN.format(command=command), 0o755)
        return host_key_line
    # The host's sysctl settings are not the node's: `sysctl --system` on a node would try to set the host's
    # kernel.* keys, which a node may not write (node_init: /proc/sys read-only but net). Nodes start empty.
    for rel in ("etc/sysctl.d", "usr/lib/sysctl.d", "run/sysctl.d"):
        if not lower(rel).parent.is_symlink():
            opaque_dir(upper, rel, 0o755)
    if os.path.lexists(lower("etc/sysctl.conf")):
        whiteout(upper, "etc/sysctl.conf")
    munge = _ids("munge")
    put(upper, "etc/munge/munge.key", munge_key, 0o400, munge)
    put(upper, "etc/supervisor/conf.d/testbed.conf", supervisor_conf(layout, node))
    if layout.configless and not layout.bare and node != "ctl":
        put(upper, CONFIGLESS_PROGRAM_PATH, configless_program(layout))
    slurm = _ids("slurm")
    for rel in ("var/lib/slurm/slurmctld", "var/lib/slurm/slurmd", "var/log/slurm"):
        os.chown(_mirror_mkdir(upper, rel), *slurm)
    if not layout.bare and (node == "ctl" or not layout.configless):
        put(upper, "etc/slurm/slurm.conf", slurm_conf(layout))
        put(upper, "etc/slurm/gres.conf", gres_conf(layout))
    install_standins(upper)
    install_test_users(upper)
    if node == "ctl" and layout.accounting:
        install_accounting(upper, db_pass)
    if repo:
        install_package_sources(upper, repo)
    if node != "ctl":  # a vendor hook as on Cluster Toolkit images, for the desired state's rxdm patch
        put(upper, desired_state.RXDM.lstrip("/"), desired_state.RXDM_SCRIPT, 0o755)
        install_gpu_standins(upper)
        for rel, (data, mode) in reboot.files().items():  # RebootProgram: asks the keeper (reboot.py)
            put(upper, rel, data, mode)
    return host_key_line


LIGHT_SLURM_STANDIN = """#!/bin/sh
# STAND-IN for {command} on a light testbed node (no Slurm daemons): answers nothing, successfully, except
# `scontrol show node -o NAME`, which says the node is idle (so a restart's readiness check passes).
if [ "{command}" = scontrol ] && [ "$1" = show ] && [ "$2" = node ] && [ "$3" = -o ] && [ -n "$4" ]; then
    echo "NodeName=$4 State=IDLE"
fi
exit 0
"""


def install_standins(upper: Path) -> None:
    """Put the testbed-only mount.nfs, mount.lustre, enroot, all_reduce_perf and Pyxis stand-ins into a node."""
    put(upper, "usr/sbin/mount.nfs", (HERE / "standins" / "mount.nfs").read_bytes(), 0o755)
    put(upper, "usr/sbin/mount.lustre", (HERE / "standins" / "mount.lustre").read_bytes(), 0o755)
    put(upper, "usr/bin/enroot", (HERE / "standins" / "enroot").read_bytes(), 0o755)
    put(upper, "usr/local/bin/all_reduce_perf", (HERE / "standins" / "all_reduce_perf").read_bytes(), 0o755)
    pkg = (HERE / "standins" / "pkg_resources.py").read_bytes()
    put(upper, f"{NODE_PYLIB.lstrip('/')}/pkg_resources.py", pkg)
    for rel, (data, mode) in pyxis_standin.files(BASE / "cache", _LOWER[0]).items():
        put(upper, rel, data, mode)


def install_package_sources(upper: Path, repo: package_repo.Repository) -> None:
    """--packages: apt's only source and dnf's repository are the testbed's (package_repo.node_layer)."""
    edits = package_repo.node_layer(repo)
    for rel in edits.opaque:
        opaque_dir(upper, rel, 0o755)
    for rel in edits.mirror_dirs:
        _mirror_mkdir(upper, rel)
    for rel in edits.hide:
        whiteout(upper, rel)
    for rel, (data, mode) in edits.files.items():
        put(upper, rel, data, mode)


def install_gpu_standins(upper: Path) -> None:
    """Compute nodes: the STAND-IN nvidia-smi and dmesg replaying a recorded H200 (faults planted by a file)."""
    put(upper, "usr/local/bin/nvidia-smi", (HERE / "standins" / "nvidia-smi").read_bytes(), 0o755)
    put(upper, "usr/local/bin/dmesg", (HERE / "standins" / "dmesg").read_bytes(), 0o755)
    for rel, (data, mode) in modules_standin.files().items():  # STAND-IN modprobe (/sys/module: node_init)
        put(upper, rel, data, mode)


def client_file_binds(layout: Layout) -> dict[str, str]:
    """Light nodes: host file -> path in the node (the host's path) of ssh_config, known_hosts and key.

    Inside a node the ssh_config is the node variant (no ProxyCommand: nodes reach each other on the
    bridge), so the inventory's ssh options work unchanged on a node that relays to others, e.g. a
    ClusterShell gateway.
    """
    return {str(layout.state / "node-ssh_config"): str(layout.ssh_config),
            str(layout.known_hosts): str(layout.known_hosts), str(layout.identity): str(layout.identity)}


def write_client_files(layout: Layout, host_keys: list[str]) -> None:
    """known_hosts and ssh_config for reaching the nodes from the host (and, light, from the nodes)."""
    layout.known_hosts.write_text("".join(host_keys))
    layout.ssh_config.write_text(ssh_config(layout, proxy=True))
    if layout.light:
        (layout.state / "node-ssh_config").write_text(ssh_config(layout, proxy=False))


def ssh_config(layout: Layout, proxy: bool) -> str:
    """ssh_config with one Host entry per node; PROXY: through the admin namespace (the host's variant)."""
    proxy_line = f"    ProxyCommand nsenter --net=/run/netns/{layout.admin_ns} nc %h %p\n" if proxy else ""
    entries = [f"# ssh_config of testbed {layout.name} (written by deploy/testbed)\n"]
    for node in layout.nodes:
        entries.append(f"""Host {node}
    HostName {layout.ip(node)}
    User root
    IdentityFile {layout.identity}
    IdentitiesOnly yes
    UserKnownHostsFile {layout.known_hosts}
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
{proxy_line}    LogLevel ERROR
""")
    return "\n".join(entries)


# --------------------------------------------------------------------------------------------- network


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
        if not os.listdir("/run/netns") and not other_testbeds(layout.name) and _is_mountpoint("/run/netns"):
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


def _is_mountpoint(path: str) -> bool:
    """Whether PATH is a mount point in our mount namespace."""
    return any(m == path for m in mountpoints())


def mountpoints() -> list[str]:
    """Mount points of our mount namespace, in mount order."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            out.append(line.split()[4].replace("\\040", " "))
    return out


# --------------------------------------------------------------------------------------------- nodes


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


def start_node(layout: Layout, node: str) -> subprocess.Popen[str]:
    """Launch a node's bootstrap; it prints the host PID of the node's PID 1."""
    if _LOWER[0] != Path(layout.lower):  # the reboot keeper's process starts nodes too
        use_lower(Path(layout.lower))
    spec = {"name": layout.name, "node": node, "state": str(layout.state), "ip": layout.ip(node),
            "prefixlen": layout.prefixlen, "gpus": 0 if node == "ctl" else GPUS_PER_NODE,
            "sys_module": node != "ctl" and not layout.light,  # the modprobe stand-in's tmpfs /sys/module
            "fresh_boot": not layout.light,  # boot clock from zero and a new STAND-IN boot id (reboot.py)
            "boot_copies": package_repo.boot_copies() if node != "ctl" and not layout.light else {},
            "peers": [] if layout.light else layout.nodes, "light": layout.light, "mount_root": layout.light,
            "binds": client_file_binds(layout) if layout.light else {},
            "marker": layout.marker(node), "console": str(layout.node_dir(node) / "console.log"),
            "munge_uid": _ids("munge")[0], "munge_gid": _ids("munge")[1],
            "run_dirs": [["mysqld", 0o755, *_ids("mysql")]] if layout.accounting and node == "ctl" else []}
    cmd = ["nsenter", f"--net=/run/netns/{layout.ns(node)}", NODE_PYTHON, "-I", "-S",
           str(HERE / "node_init.py"), json.dumps(spec)]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            env={"PATH": PATH, "RECONCILER_TESTBED": layout.marker(node)})


START_PARALLEL = 16  # node bootstraps at a time: enough to keep 2 cores busy, few enough not to thrash


def start_nodes(layout: Layout, nodes: list[str]) -> None:
    """Start nodes, START_PARALLEL at a time, and record their PID 1."""
    def one(node: str) -> tuple[str, subprocess.Popen[str], str, str]:
        proc = start_node(layout, node)
        out, err = proc.communicate()
        return node, proc, out, err

    with ThreadPoolExecutor(max_workers=START_PARALLEL) as pool:
        started = list(pool.map(one, nodes))
    failed = []
    for node, proc, out, err in started:
        if proc.returncode != 0 or not out.strip().isdigit():
            failed.append(f"node {node} failed to start: {err.strip()}")
        else:
            layout.pids[node] = int(out.strip())
    layout.save()
    if failed:
        raise TestbedError("; ".join(failed))


def node_alive(layout: Layout, node: str) -> bool:
    """Whether the node's PID 1 is alive and carries the node's exact marker."""
    pid = layout.pids.get(node)
    return bool(pid) and environ_marker(pid) == layout.marker(node)  # type: ignore[arg-type]


def node_dead(layout: Layout, node: str) -> bool:
    """Whether a starting node's PID 1 has really gone: exited, a zombie, or another process's PID.

    While PID 1 execs supervisord, /proc/PID/environ reads empty for a moment (the new memory map has no
    environment yet), so a missing marker alone is not death; it must still be missing a moment later.
    """
    pid = layout.pids.get(node)
    if not pid or not _alive(pid):
        return True
    for _ in range(20):
        marker = environ_marker(pid)
        if marker == layout.marker(node):
            return False
        if marker is not None and marker != "":
            return True
        time.sleep(0.05)
    return not _alive(pid) or environ_marker(pid) != layout.marker(node)


def environ_marker(pid: int) -> str | None:
    """The RECONCILER_TESTBED value in a process's environment, if any."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in env:
        if entry.startswith(b"RECONCILER_TESTBED="):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def listening_ports(pid: int) -> set[int]:
    """TCP ports listening in the network namespace of PID."""
    ports = set()
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{name}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def node_ready(layout: Layout, node: str) -> bool:
    """sshd and munged up, and the Slurm daemon listening unless --bare (light: sshd listening)."""
    pid = layout.pids[node]
    if layout.light:
        return PORT_SSH in listening_ports(pid)
    if not os.path.exists(f"/proc/{pid}/root/run/munge/munge.socket.2"):
        return False
    want = {PORT_SSH}
    if not layout.bare:
        want.add(PORT_SLURMCTLD if node == "ctl" else PORT_SLURMD)
    if layout.accounting and node == "ctl":
        want.add(PORT_SLURMDBD)
    if layout.packages and node == "ctl":
        want.add(package_repo.PORT)
    return want <= listening_ports(pid)


def nsenter_argv(layout: Layout, node: str, command: str) -> list[str]:
    """argv running a shell command inside a node (all its namespaces) with a clean environment."""
    return ["nsenter", "-t", str(layout.pids[node]), "-a", "--", "/usr/bin/env", "-i", f"PATH={PATH}",
            "HOME=/root", "LANG=C.UTF-8", "/bin/sh", "-c", command]


def nsenter(layout: Layout, node: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a shell command inside a node and capture its output."""
    argv = nsenter_argv(layout, node, command)
    return subprocess.run(argv, text=True, capture_output=True, timeout=timeout)


def cluster_registered(layout: Layout) -> bool:
    """Whether `sacctmgr show cluster` on ctl lists the testbed's cluster (--accounting)."""
    proc = nsenter(layout, "ctl", "sacctmgr -n -P show cluster format=cluster")
    return layout.name in proc.stdout.split()


def slurm_states(layout: Layout) -> dict[str, str]:
    """Node states as sinfo on ctl reports them."""
    proc = nsenter(layout, "ctl", "sinfo -h -N -o '%N %t'")
    return dict(line.split() for line in proc.stdout.splitlines() if len(line.split()) == 2)


def wait_ready(layout: Layout, timeout: float) -> None:
    """Wait until every node is up and, unless --bare, sinfo shows every compute node idle."""
    deadline = time.monotonic() + timeout
    pending = set(layout.nodes)
    while pending and time.monotonic() < deadline:
        pending = {n for n in pending if not node_ready(layout, n)}
        if pending:
            dead = [n for n in pending if node_dead(layout, n)]
            if dead:
                raise TestbedError(f"node(s) died while starting: {', '.join(dead)}; see "
                                   f"{layout.node_dir(dead[0]) / 'console.log'}")
            time.sleep(0.05)
    if pending:
        raise TestbedError(f"nodes not ready after {timeout:.0f}s: {', '.join(sorted(pending))}")
    trace("sshd, munged and Slurm daemons listening")
    while layout.accounting and not layout.bare and not cluster_registered(layout):
        if time.monotonic() > deadline:
            raise TestbedError(f"cluster {layout.name} not in sacctmgr show cluster after {timeout:.0f}s")
        time.sleep(0.2)
    if layout.accounting:
        trace("cluster registered in slurmdbd")
    while not layout.bare and not layout.light:
        states = slurm_states(layout)
        if all(states.get(n) == "idle" for n in layout.compute_nodes):
            return
        if time.monotonic() > deadline:
            bad = {n: states.get(n, "?") for n in layout.compute_nodes if states.get(n) != "idle"}
            raise TestbedError(f"compute nodes not idle after {timeout:.0f}s: {bad}")
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------- teardown


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


def _alive(pid: int) -> bool:
    """Whether PID exists and is not a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def kill_all(pids: set[int], timeout: float = 10) -> set[int]:
    """SIGKILL PIDs and wait until they are gone; return the survivors."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = {p for p in pids if _alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = {p for p in left if _alive(p)}
    return left


def unmount_state(layout: Layout) -> None:
    """Unmount everything mounted below the state directory, deepest first."""
    prefix = str(layout.state) + "/"
    for mp in sorted((m for m in mountpoints() if m.startswith(prefix)), key=len, reverse=True):
        with contextlib.suppress(OSError):
            node_init.umount2(mp, node_init.MNT_DETACH)


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


# --------------------------------------------------------------------------------------------- commands


def _is_up(name: str) -> bool:
    """Whether any node of testbed NAME is alive."""
    layout = Layout.load(name)
    return layout is not None and any(node_alive(layout, n) for n in layout.nodes)


def running(layout: Layout) -> bool:
    """Whether every node of a saved testbed is alive."""
    return bool(layout.pids) and all(node_alive(layout, n) for n in layout.nodes)


def release_root(release: str) -> Path:
    """The lower layer of RELEASE's nodes, built with debootstrap first when needed (slurm_root.py)."""
    if os.geteuid() != 0:
        raise TestbedError("must run as root (namespaces, mounts)")
    try:
        return slurm_root.ensure_root(release, log)
    except (slurm_root.RootError, OSError, subprocess.SubprocessError) as e:
        raise TestbedError(str(e)) from e


def cmd_up(args: argparse.Namespace) -> int:
    """Bring a testbed up (idempotent) and print its desired-state directory last."""
    release = args.slurm or slurm_root.default_release()
    if release != slurm_root.host_release() and (args.light or args.packages):
        raise TestbedError(f"--light and --packages run on the host's Slurm release "
                           f"({slurm_root.host_release() or 'none'}), not {release}")
    root = release_root(release)
    require_root_and_deps(args.accounting, args.packages, root)
    use_lower(root)
    want = Layout(name=args.name, computes=args.nodes, subnet=args.subnet, bare=args.bare,
                  configless=args.configless, light=args.light, accounting=args.accounting, packages=args.packages,
                  slurm=release, lower=str(root))
    if want.light and (want.bare or want.configless or want.accounting):
        raise TestbedError("--light has no Slurm: it does not combine with --bare, --configless or --accounting")
    if want.light and want.packages:
        raise TestbedError("--packages needs supervisord on ctl (its HTTP server): it does not combine with --light")
    validate_layout(want)
    with locked(want.name):
        old = Layout.load(want.name)
        if old and running(old):
            if (old.computes, old.subnet, old.bare, old.configless, old.light, old.accounting, old.packages,
                    old.slurm) != (want.computes, want.subnet, want.bare, want.configless, want.light,
                                   want.accounting, want.packages, want.slurm):
                raise TestbedError(f"testbed {old.name} is already up with {old.computes} compute nodes, "
                                   f"subnet {old.subnet}, bare={old.bare}, configless={old.configless}, "
                                   f"light={old.light}, accounting={old.accounting}, packages={old.packages}, "
                                   f"Slurm {old.slurm or 'the host'}; run down first to change it")
            log(f"testbed {old.name} is already up ({len(old.nodes)} nodes)")
            print(old.desired_state)
            return 0
        if old or testbed_netns(want.name) or want.state.exists():
            log(f"cleaning up a stale testbed {want.name}")
            teardown(old or want)
        started = time.monotonic()
        try:
            bring_up(want)
        except (TestbedError, OSError, subprocess.SubprocessError, package_repo.RepoError) as e:
            diagnostics(want)
            if not args.keep:
                log("tearing the failed testbed down (use --keep to keep it for a look)")
                teardown(want)
            raise TestbedError(f"up failed: {e}") from e
        log(f"testbed {want.name} up: {len(want.nodes)} nodes in {time.monotonic() - started:.1f}s; "
            f"ssh -F {want.ssh_config} gpu01")
    print(want.desired_state)
    return 0


def bring_up(layout: Layout) -> None:
    """Prepare, start and wait for every node; write the client files and the desired state."""
    layout.state.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.state, 0o700)
    layout.save()
    if not layout.identity.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"testbed-{layout.name}",
             "-f", str(layout.identity)])
    client_pub = Path(f"{layout.identity}.pub").read_text()
    munge_key = os.urandom(1024)
    db_pass = accounting_password(layout) if layout.accounting else ""
    if layout.computes > NARROW_MAX:
        raise_host_limits(len(layout.nodes))
    repo = package_repo.build(layout.state, layout.node_dir("ctl") / "upper", "ctl",
                              BASE / "cache") if layout.packages else None
    if repo:
        trace("package repository built")
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = list(pool.map(lambda n: prepare_node(layout, n, munge_key, client_pub, db_pass, repo), layout.nodes))
    write_client_files(layout, keys)
    trace("node layers prepared")
    network_up(layout)
    trace("network up")
    if not layout.light:  # a light node mounts its own root inside its mount namespace (node_init)
        mount_roots(layout)
        trace("roots mounted")
    if not layout.light:
        mount_lustre(layout)
    with ThreadPoolExecutor(max_workers=1) as pool:  # the datadir is made while the nodes start
        datadir = pool.submit(init_mariadb_datadir, layout) if layout.accounting else None
        start_nodes(layout, layout.nodes)
        trace("nodes started")
        if datadir:
            datadir.result()
            trace("MariaDB datadir initialised")
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:  # --packages: apt-get update while Slurm settles
        updated = pool.submit(package_repo.apt_update_when_up, layout.nodes,
                              lambda: all(node_ready(layout, n) for n in layout.nodes), stop,
                              lambda node, cmd, timeout: nsenter(layout, node, cmd, timeout)) if repo else None
        try:
            wait_ready(layout, timeout=60 + layout.computes)
        except BaseException:
            stop.set()
            raise
        if updated:
            updated.result()
            trace("apt-get update on every node")
    write_desired_state(layout)
    if not layout.light:
        reboot.start_keeper(layout)
    trace("ready")


def diagnostics(layout: Layout) -> None:
    """Print what the nodes' consoles and Slurm logs say, for a failed up."""
    for node in layout.nodes:
        lines = []
        extra = ("root/var/log/supervisor/mariadb.log", "root/var/log/slurm/slurmdbd.log") if (
            layout.accounting and node == "ctl") else ()
        for log_file in ("console.log", "root/var/log/supervisor/supervisord.log", *extra):
            path = layout.node_dir(node) / log_file
            with contextlib.suppress(OSError):
                lines += path.read_text(errors="replace").splitlines()[-5:]
        if not node_alive(layout, node) or any("rror" in line for line in lines):
            log(f"{node}: " + ("\n    ".join(["", *lines]) if lines else "no log"))


def write_desired_state(layout: Layout) -> None:
    """Write the testbed's desired-state directory (see desired_state.py)."""
    desired_state.write(layout, cpus=NODE_CPUS, memory_mb=NODE_MEMORY_MB, gpus=GPUS_PER_NODE)


# Host sysctls a wide testbed needs (raised, never lowered, by `up` beyond NARROW_MAX compute nodes). The
# neighbour table is one for all network namespaces: the admin namespace holds an ARP entry per node and
# every node one for the bridge, so the default gc_thresh3 of 1024 overflows near 500 nodes.
def host_limits(nodes: int) -> dict[str, int]:
    """sysctl -> minimum value for a testbed of NODES nodes (beside the other testbeds on the host)."""
    entries = 4 * nodes + 1024
    return {"net.ipv4.neigh.default.gc_thresh1": entries // 4, "net.ipv4.neigh.default.gc_thresh2": entries // 2,
            "net.ipv4.neigh.default.gc_thresh3": entries, "kernel.pid_max": max(32768, 32 * nodes),
            "fs.inotify.max_user_instances": 1024}


def raise_host_limits(nodes: int) -> None:
    """Raise the host sysctls of host_limits where they are lower (logged; README: "Host settings")."""
    for key, want in host_limits(nodes).items():
        path = Path("/proc/sys") / key.replace(".", "/")
        try:
            have = int(path.read_text().split()[0])
            if have < want:
                path.write_text(f"{want}\n")
                log(f"raised {key} from {have} to {want}")
        except (OSError, ValueError) as e:
            log(f"could not raise {key}: {e}")


def cmd_down(args: argparse.Namespace) -> int:
    """Tear a testbed down completely."""
    if os.geteuid() != 0:
        raise TestbedError("must run as root")
    with locked(args.name, remove=True):
        layout = Layout.load(args.name) or Layout(name=args.name)
        started = time.monotonic()
        teardown(layout)
        log(f"testbed {args.name} down in {time.monotonic() - started:.2f}s")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print each node with its address, PID 1 and listening services; exit 1 when not fully up."""
    layout = Layout.load(args.name)
    if not layout:
        print(f"testbed {args.name}: not up")
        return 1
    mode = "light" if layout.light else (
        ("bare" if layout.bare else "slurm") + (" configless" if layout.configless else "")
        + (" accounting" if layout.accounting else "") + (" packages" if layout.packages else ""))
    print(f"testbed {layout.name}: {len(layout.nodes)} nodes, subnet {layout.cidr}, {mode}, "
          f"state {layout.state}")
    names = {PORT_SSH: "sshd", PORT_SLURMCTLD: "slurmctld", PORT_SLURMD: "slurmd", PORT_SLURMDBD: "slurmdbd",
             PORT_MARIADB: "mariadb", package_repo.PORT: "packages"}
    ok = True
    for node in layout.nodes:
        alive = node_alive(layout, node)
        ok &= alive
        ports = listening_ports(layout.pids[node]) if alive else set()
        services = ",".join(names[p] for p in sorted(ports) if p in names) or "-"
        print(f"  {node:8} {layout.ip(node):15} pid {layout.pids.get(node, '-')!s:8} "
              f"{'up' if alive else 'DOWN':5} {services}")
    print(f"ssh_config {layout.ssh_config}\ndesired-state {layout.desired_state}")
    return 0 if ok else 1


def cmd_reboot(args: argparse.Namespace) -> int:
    """Reboot a compute node as its RebootProgram would (reboot.py); print its new boot id."""
    if os.geteuid() != 0:
        raise TestbedError("must run as root")
    layout = Layout.load(args.name)
    if not layout or not node_alive(layout, args.node):
        raise TestbedError(f"node {args.node} of testbed {args.name} is not up")
    try:
        new_id, took = reboot.reboot_node(args.name, args.node)
    except (reboot.RebootError, OSError, subprocess.SubprocessError) as e:
        raise TestbedError(f"reboot of {args.node} failed: {e}") from e
    log(f"{args.node} rebooted in {took:.2f}s")
    print(new_id)
    return 0


def cmd_ssh(args: argparse.Namespace) -> int:
    """Exec ssh to a node with the testbed's ssh_config."""
    layout = Layout.load(args.name)
    if not layout:
        raise TestbedError(f"testbed {args.name} is not up")
    os.execvp("ssh", ["ssh", "-F", str(layout.ssh_config), args.node, *args.argv])
    return 1


def cmd_exec(args: argparse.Namespace) -> int:
    """Exec a command inside a node through nsenter (no SSH); the words are joined and run by sh -c."""
    layout = Layout.load(args.name)
    if not layout or not node_alive(layout, args.node):
        raise TestbedError(f"node {args.node} of testbed {args.name} is not up")
    os.execvp("nsenter", nsenter_argv(layout, args.node, " ".join(args.argv) or "exec bash -l"))
    return 1


POLICY_RC_D = "#!/bin/sh\n# written by deploy/testbed: start no daemon while installing packages\nexit 101\n"


def cmd_deps(args: argparse.Namespace) -> int:
    """Install the Debian packages the testbed needs, with a policy-rc.d that stops daemons starting."""
    if os.geteuid() != 0:
        raise TestbedError("must run as root")
    up = [p.name for p in BASE.iterdir() if p.is_dir() and _is_up(p.name)] if BASE.is_dir() else []
    if up:
        raise TestbedError(f"testbed(s) up: {', '.join(up)}; the host's / is their lower layer: down first")
    policy = Path("/usr/sbin/policy-rc.d")
    if not policy.exists() or "exit 101" not in policy.read_text():
        if policy.exists():
            policy.rename(policy.with_suffix(".d.reconciler-testbed.bak"))
        policy.write_text(POLICY_RC_D)
        policy.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"],
                ["apt-get", "install", "-y", "--no-install-recommends", *DEBIAN_PACKAGES, *TEST_PACKAGES]):
        log(" ".join(cmd))
        if subprocess.run(cmd, env=env).returncode != 0:
            raise TestbedError(f"{' '.join(cmd)} failed")
    for release in slurm_root.other_releases():  # `up --slurm RELEASE` for the release the host does not have
        release_root(release)
    log(f"fetching real Debian packages for `up --packages` into {package_repo.DEB_CACHE}")
    try:
        package_repo.fetch_real_debs()
    except package_repo.RepoError as e:
        raise TestbedError(str(e)) from e
    return 0


def parser() -> argparse.ArgumentParser:
    """Command-line interface."""
    p = argparse.ArgumentParser(prog="testbed", description="Local multi-node Slurm testbed (needs root)")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="bring a testbed up; prints its desired-state directory last")
    up.add_argument("--nodes", type=int, default=4,
                    help="number of compute nodes gpu01..gpuNN (default 4; gpu001.. from 100, gpu0001.. from 1000)")
    up.add_argument("--bare", action="store_true", help="no slurm.conf, Slurm daemons not started")
    up.add_argument("--configless", action="store_true",
                    help="configless Slurm: slurm.conf on ctl only, slurmd started with --conf-server ctl")
    up.add_argument("--light", action="store_true",
                    help="light nodes: sshd only (no supervisord, munge or Slurm), for hundreds of nodes")
    up.add_argument("--accounting", action="store_true",
                    help="slurmdbd and MariaDB on ctl, slurmctld with accounting_storage/slurmdbd, associations "
                         "enforced")
    up.add_argument("--packages", action="store_true",
                    help="a package repository on ctl (real Debian packages and stand-ins; apt and dnf) as every "
                         "node's only source")
    up.add_argument("--subnet", default=DEFAULT_SUBNET,
                    help="first three octets (default 10.250.0); beyond 200 compute nodes a /20 from there")
    up.add_argument("--slurm", choices=sorted(slurm_root.RELEASES), default="",
                    help="Slurm release of the nodes (default: the host's); another release's Debian root is built "
                         "once with debootstrap and cached")
    up.add_argument("--keep", action="store_true", help="keep a testbed whose up failed, for debugging")
    for name, helptext in (("down", "stop everything and delete the testbed"), ("status", "show nodes")):
        sub.add_parser(name, help=helptext)
    rb = sub.add_parser("reboot", help="reboot a compute node (every process ended, booted again, new boot id); "
                                       "prints the new boot id")
    rb.add_argument("node")
    ssh = sub.add_parser("ssh", help="ssh to a node: ssh NODE [CMD...]")
    ex = sub.add_parser("exec", help="run a command in a node through nsenter: exec NODE CMD...")
    for s in (ssh, ex):
        s.add_argument("node")
        s.add_argument("argv", nargs=argparse.REMAINDER, help="command to run")
    sub.add_parser("deps", help="apt-get install the Debian packages the testbed needs")
    for s in sub.choices.values():
        s.add_argument("--name", default=DEFAULT_NAME, help=f"testbed name (default {DEFAULT_NAME})")
    return p


COMMANDS = {"up": cmd_up, "down": cmd_down, "status": cmd_status, "ssh": cmd_ssh, "exec": cmd_exec,
            "deps": cmd_deps, "reboot": cmd_reboot}


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except TestbedError as e:
        print(f"testbed: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
