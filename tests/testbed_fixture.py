"""Pytest plugin: a running local testbed (deploy/testbed) for integration tests.

Register it with ``pytest_plugins = ["tests.testbed_fixture"]`` (tests/testbed/conftest.py does so for its
own tests when nobody else did). Fixtures:

- ``testbed`` (session): a running testbed with Slurm configured, ``RECONCILER_TESTBED_NODES`` compute nodes
  (default 4), under a name and subnet unique to this pytest process.
- ``testbed_factory`` (session): ``make(nodes=2, bare=False, configless=False, light=False, accounting=False,
  packages=False, slurm="")`` brings up more testbeds (``slurm``: a release of ALL_RELEASES, default the host's;
  another release's Debian root is built once with debootstrap, see deploy/testbed/slurm_root.py), all torn down at the end of the session (``light``: sshd-only nodes,
  no Slurm; beyond 200 compute nodes the testbed takes a /20 and three- or four-digit names; ``accounting``:
  slurmdbd and MariaDB on ctl, associations enforced; ``packages``: the package repository on ctl as every node's
  only apt/dnf source, its versions in ``Testbed.package_manifest``; see deploy/testbed/README.md).

Every testbed is torn down at the end of the session whatever the tests did (also at interpreter exit and on
SIGTERM); testbeds left behind by a killed pytest are removed by the next run. Without root or the Debian
packages, the fixtures skip with the reason.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / "deploy" / "testbed" / "testbed"
BASE = Path(os.environ.get("RECONCILER_TESTBED_BASE", "/var/lib/reconciler-testbed"))
OWNER_FILE = "pytest-owner"
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NEEDED = ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
          "/usr/bin/sinfo", "/usr/bin/supervisord", "/usr/sbin/ip", "/usr/bin/nc", "/usr/bin/mksquashfs",
          "/usr/sbin/exportfs", "/usr/bin/nsenter", "/usr/bin/python3"]
ACCOUNTING_NEEDED = ["/usr/sbin/slurmdbd", "/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db", "/usr/bin/sacctmgr"]
# `up --packages` (deploy/testbed/package_repo.py: its PACKAGES_BINARIES and DEB_CACHE, fetched by `testbed deps`)
PACKAGES_NEEDED = ["/usr/bin/dpkg-scanpackages", "/usr/bin/createrepo_c", "/usr/bin/rpmbuild", "/usr/bin/gpg",
                   "/usr/bin/dnf"]
DEB_CACHE = Path(os.environ.get("RECONCILER_TESTBED_DEB_CACHE", "/var/cache/reconciler-testbed/debs"))
# The Slurm releases a testbed runs (deploy/testbed/slurm_root.py RELEASES): the suites that talk to Slurm
# run on each, e.g. `@pytest.fixture(scope="module", params=SLURM_RELEASES)`.
SLURM_RELEASES = ("22.05", "24.11")
# Every release a testbed can run: SLURM_RELEASES and 26.05 (Debian forky's root). Only the suites issue 44 names run
# on 26.05 (the observed consequence table, deploy/demo, the 24.11 -> 26.05 upgrade), so the suite does not triple.
ALL_RELEASES = (*SLURM_RELEASES, "26.05")


def _slurm_root() -> ModuleType:
    """deploy/testbed/slurm_root.py (not a package: loaded by path), the one reader of installed Slurm releases."""
    module = sys.modules.get("slurm_root")
    if module is None:
        spec = importlib.util.spec_from_file_location("slurm_root", REPO / "deploy" / "testbed" / "slurm_root.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["slurm_root"] = module
    return module


def host_release() -> str:
    """The host's Slurm release ('22.05' on Debian 12, '24.11' on Debian 13; '' without slurmctld)."""
    return str(_slurm_root().host_release())


def unavailable() -> str | None:
    """Why the testbed cannot run here, or None."""
    if os.geteuid() != 0:
        return "the testbed needs root (namespaces, mounts)"
    missing = [b for b in NEEDED if not os.path.exists(b)]
    if missing:
        return f"missing {', '.join(missing)}: run deploy/testbed/testbed deps"
    return None


@dataclass
class Testbed:
    """A running testbed: its nodes, files, and ways to run commands on them."""

    __test__ = False  # not a test class, whatever its name

    name: str
    subnet: str
    computes: list[str]
    bare: bool
    state_dir: Path
    up_output: str = ""
    configless: bool = False
    light: bool = False
    accounting: bool = False
    packages: bool = False
    slurm: str = ""  # the nodes' Slurm release ('22.05', '24.11', '26.05')
    _pids: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def nodes(self) -> list[str]:
        """All nodes, ctl first."""
        return ["ctl", *self.computes]

    @property
    def desired_state(self) -> Path:
        """The desired-state directory `up` wrote."""
        return self.state_dir / "desired-state"

    @property
    def ssh_config(self) -> Path:
        """ssh_config with a Host entry per node."""
        return self.state_dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        """known_hosts with every node's host key."""
        return self.state_dir / "known_hosts"

    @property
    def identity(self) -> Path:
        """Private key for root on every node."""
        return self.state_dir / "id_ed25519"

    @property
    def package_manifest(self) -> dict[str, Any]:
        """<state>/packages/manifest.json of an `up --packages` testbed: every version, real and stand-in, deb and
        rpm, and the repository's URL (read versions from here, never hard-code them)."""
        return json.loads((self.state_dir / "packages" / "manifest.json").read_text())

    def ip(self, node: str) -> str:
        """A node's address (ctl at offset 1 from A.B.C.0, gpuN at 10+N, carrying into the third octet)."""
        offset = 1 if node == "ctl" else 10 + int(node[3:])
        a, b, c = (int(x) for x in self.subnet.split("."))
        return f"{a}.{b}.{c + offset // 256}.{offset % 256}"

    def pid1(self, node: str) -> int:
        """Host PID of a node's PID 1 (supervisord), read at each call: a node reboot (deploy/testbed/reboot.py)
        gives the node a new PID 1."""
        self._pids = json.loads((self.state_dir / "state.json").read_text())["pids"]
        return int(self._pids[node])

    def run(self, node: str, cmd: str, check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a shell command inside a node through nsenter (no SSH), with a clean environment."""
        argv = ["nsenter", "-t", str(self.pid1(node)), "-a", "--", "/usr/bin/env", "-i", f"PATH={NODE_PATH}",
                "HOME=/root", "LANG=C.UTF-8", "/bin/sh", "-c", cmd]
        return _checked(subprocess.run(argv, capture_output=True, text=True, timeout=timeout), node, cmd, check)

    def ssh(self, node: str, cmd: str, check: bool = False, timeout: float = 120,
            options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        """Run a command on a node over real SSH with the testbed's ssh_config."""
        argv = ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", *options, node, cmd]
        return _checked(subprocess.run(argv, capture_output=True, text=True, timeout=timeout), node, cmd, check)

    def host_pids(self, node: str, comm: str) -> list[int]:
        """Host PIDs of the processes named COMM inside a node (matched by the node's PID namespace)."""
        want = os.stat(f"/proc/{self.pid1(node)}/ns/pid").st_ino
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                if (os.stat(f"/proc/{entry}/ns/pid").st_ino == want
                        and Path(f"/proc/{entry}/comm").read_text().strip() == comm):
                    found.append(int(entry))
        return sorted(found)

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until sinfo on ctl shows every compute node idle."""
        cmd = "sinfo -h -N -o '%N %t'"
        script = (f"end=$(( $(date +%s) + {int(timeout)} )); while [ $(date +%s) -lt $end ]; do "
                  f"[ -z \"$({cmd} | grep -v ' idle$')\" ] && [ -n \"$({cmd})\" ] && exit 0; sleep 0.2; done; "
                  f"{cmd}; exit 1")
        proc = self.run("ctl", script, timeout=timeout + 10)
        assert proc.returncode == 0, f"compute nodes not idle: {proc.stdout}"

    def down(self) -> None:
        """Tear the testbed down."""
        _testbed_cli("down", "--name", self.name)


WIDE_FROM = 200  # deploy/testbed's NARROW_MAX: more compute nodes than this take a /20


def compute_names(nodes: int) -> list[str]:
    """gpu01..gpuNN as deploy/testbed names them: two digits, or as many as NODES has (gpu001, gpu0001)."""
    width = max(2, len(str(nodes)))
    return [f"gpu{i:0{width}d}" for i in range(1, nodes + 1)]


def _checked(proc: subprocess.CompletedProcess[str], node: str, cmd: str,
             check: bool) -> subprocess.CompletedProcess[str]:
    """Raise AssertionError with the output when CHECK and the command failed."""
    if check and proc.returncode != 0:
        raise AssertionError(f"{node}: {cmd!r} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def _testbed_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run deploy/testbed/testbed."""
    return subprocess.run([str(TESTBED), *args], capture_output=True, text=True, timeout=timeout)


def _pid_alive(pid: int) -> bool:
    """Whether a process exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale() -> None:
    """Tear down testbeds left by a pytest process that no longer runs."""
    if not BASE.is_dir():
        return
    for owner in BASE.glob(f"*/{OWNER_FILE}"):
        with contextlib.suppress(OSError, ValueError):
            if not _pid_alive(int(owner.read_text().strip())):
                _testbed_cli("down", "--name", owner.parent.name)


RESERVED = ".subnet-"  # BASE/.subnet-A.B.C holds the PID of the pytest process that picked that subnet


def _used_subnets() -> set[str]:
    """Subnets of the testbeds that exist now, and those a live pytest process picked (it may not be up yet)."""
    used = set()
    for state in BASE.glob("*/state.json") if BASE.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, KeyError):
            used.add(json.loads(state.read_text())["subnet"])
    for mark in BASE.glob(f"{RESERVED}*") if BASE.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            if _pid_alive(int(mark.read_text().strip())):
                used.add(mark.name[len(RESERVED):])
    return used


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    """An flock that makes picking and reserving a subnet one step between pytest processes (pytest -n)."""
    BASE.mkdir(parents=True, exist_ok=True)
    with open(BASE / ".subnets.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


class Registry:
    """Testbeds this pytest process brought up, for teardown whatever happens."""

    def __init__(self) -> None:
        self.beds: list[Testbed] = []
        self.counter = 0

    def next_name_and_subnet(self, nodes: int = 4) -> tuple[str, str]:
        """A testbed name and subnet unique to this process and free on this machine: a /24 in 10.251.x, or
        beyond WIDE_FROM compute nodes a /20 in 10.252.x (third octet a multiple of 16)."""
        self.counter += 1
        name = f"pt{os.getpid() % 100000}x{self.counter}"[:12]
        with _subnet_lock():
            subnet = self._free_subnet(nodes, _used_subnets())
            (BASE / f"{RESERVED}{subnet}").write_text(f"{os.getpid()}\n")
        return name, subnet

    def _free_subnet(self, nodes: int, used: set[str]) -> str:
        """A subnet not in USED (see next_name_and_subnet)."""
        if nodes > WIDE_FROM:
            for step in range(16):
                third = ((os.getpid() + self.counter + step) % 16) * 16
                if not any(f"10.252.{third + k}" in used for k in range(16)):
                    return f"10.252.{third}"
            raise RuntimeError("no free 10.252.x.0/20 subnet for a testbed")
        for third in range((os.getpid() + self.counter * 7) % 200, 256 + 200):
            subnet = f"10.251.{third % 256}"
            if subnet not in used and 0 < third % 256 < 255:
                return subnet
        raise RuntimeError("no free 10.251.x.0/24 subnet for a testbed")

    def up(self, nodes: int, bare: bool, configless: bool = False, light: bool = False,
           accounting: bool = False, packages: bool = False, slurm: str = "") -> Testbed:
        """Bring up a new testbed (SLURM: its release, default the host's)."""
        reason = unavailable()
        slurm = slurm or host_release()
        if slurm not in ALL_RELEASES:
            raise ValueError(f"Slurm {slurm!r} is not a testbed release {ALL_RELEASES}")
        other = slurm != host_release()
        if not reason and other and not os.path.exists("/usr/sbin/debootstrap"):
            reason = f"Slurm {slurm} needs debootstrap for its root: run deploy/testbed/testbed deps"
        missing = [b for b in ACCOUNTING_NEEDED if not os.path.exists(b)] if accounting and not other else []
        if packages:
            missing += [b for b in PACKAGES_NEEDED if not os.path.exists(b)]
            missing += [] if (DEB_CACHE / "fetched.json").exists() else [f"{DEB_CACHE}/fetched.json"]
        if not reason and missing:
            reason = f"missing {', '.join(missing)}: run deploy/testbed/testbed deps"
        if reason:
            pytest.skip(reason)
        name, subnet = self.next_name_and_subnet(nodes)
        args = ["up", "--name", name, "--subnet", subnet, "--nodes", str(nodes), *(["--bare"] if bare else []),
                *(["--configless"] if configless else []), *(["--light"] if light else []),
                *(["--accounting"] if accounting else []), *(["--packages"] if packages else []),
                *(["--slurm", slurm] if slurm else [])]
        bed = Testbed(name=name, subnet=subnet, computes=compute_names(nodes), bare=bare, state_dir=BASE / name,
                      configless=configless, light=light, accounting=accounting, packages=packages, slurm=slurm)
        self.beds.append(bed)
        proc = _testbed_cli(*args)
        if proc.returncode != 0:
            # One more try: a 2-core CI machine under load can lose a start race that is not the
            # product's; the first failure stays visible in the test log.
            sys.stderr.write(f"testbed up failed once, retrying:\n{proc.stdout}\n{proc.stderr}\n")
            proc = _testbed_cli(*args)
        bed.up_output = proc.stdout
        if proc.returncode != 0:
            raise RuntimeError(f"testbed up failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        (bed.state_dir / OWNER_FILE).write_text(f"{os.getpid()}\n")
        return bed

    def down_all(self) -> None:
        """Tear down every testbed still registered."""
        while self.beds:
            self.beds.pop().down()


REGISTRY = Registry()
atexit.register(REGISTRY.down_all)


def _on_sigterm(signum: int, frame: Any) -> None:
    """Tear down the testbeds, then die of SIGTERM as we would have."""
    REGISTRY.down_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture(scope="session")
def testbed_factory() -> Iterator[Callable[..., Testbed]]:
    """make(nodes=2, bare=False, configless=False, light=False, accounting=False, packages=False, slurm="") -> a new
    running Testbed; all torn down at the end."""
    if not unavailable():
        reap_stale()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield lambda nodes=2, bare=False, configless=False, light=False, accounting=False, packages=False, slurm="": (
            REGISTRY.up(nodes, bare, configless, light, accounting, packages, slurm))
    finally:
        REGISTRY.down_all()
        signal.signal(signal.SIGTERM, previous)


_shared: dict[str, Testbed] = {}


@pytest.fixture(scope="session")
def testbed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """The session's running testbed with Slurm configured (RECONCILER_TESTBED_NODES compute nodes, default 4)."""
    bed = _shared.get("slurm")
    if bed is None or bed not in REGISTRY.beds:
        bed = testbed_factory(nodes=int(os.environ.get("RECONCILER_TESTBED_NODES", "4")))
        _shared["slurm"] = bed
    return bed


def ssh_command(bed: Testbed, node: str, *args: str) -> list[str]:
    """argv of the bare ssh client for a node of BED (for tests that drive ssh themselves)."""
    return ["ssh", "-F", str(bed.ssh_config), node, *(shlex.quote(a) for a in args)]


__all__ = ["ALL_RELEASES", "SLURM_RELEASES", "Testbed", "compute_names", "host_release", "testbed", "testbed_factory", "unavailable", "ssh_command"]
