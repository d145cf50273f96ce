"""A testbed for the benchmarks: brought up bare, converged by `reconciler apply`, always torn down."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import FrameType, TracebackType
from typing import Self

from bench.common import TESTBED, log, python_env, reconciler_argv, timed_run

BASE = Path(os.environ.get("RECONCILER_TESTBED_BASE", "/var/lib/reconciler-testbed"))
# The testbed's desired state has no cgroup.conf; the benchmark adds a harmless one so that both tools
# manage the three Slurm files the issue names.
CGROUP_YAML = "  cgroup: {ConstrainCores: false, ConstrainDevices: false, ConstrainRAMSpace: false}\n"

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_live: set[str] = set()


def unavailable() -> str | None:
    """Why no testbed can run here (not root, Debian packages missing), or None."""
    if os.geteuid() != 0:
        return "the testbed needs root"
    missing = [b for b in ("/usr/sbin/sshd", "/usr/sbin/slurmctld", "/usr/bin/supervisord", "/usr/bin/nc")
               if not os.path.exists(b)]
    return f"missing {', '.join(missing)}: run deploy/testbed/testbed deps" if missing else None


def _down(name: str) -> None:
    subprocess.run([str(TESTBED), "down", "--name", name], capture_output=True, timeout=300, check=False)
    _live.discard(name)


def _down_all() -> None:
    for name in sorted(_live):
        _down(name)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _down_all()
    raise SystemExit(128 + signum)


def track(name: str) -> None:
    """Take testbed NAME down at exit or on SIGTERM (the bench's own teardown)."""
    signal.signal(signal.SIGTERM, _on_signal)
    _live.add(name)


atexit.register(_down_all)


def supports_light() -> bool:
    """Whether this checkout's testbed has the light profile (`testbed up --light`, sshd only, hundreds of nodes)."""
    shown = subprocess.run([str(TESTBED), "up", "--help"], capture_output=True, text=True, timeout=60, check=False)
    return "--light" in shown.stdout


def bench_name(index: int) -> str:
    """A testbed name unique to this process: `bench<pid>x<index>` (at most 12 characters)."""
    return f"bench{os.getpid() % 10000:04d}x{index}"


def bench_subnet(index: int) -> str:
    """A subnet of 10.252.x for the index-th testbed of this process."""
    return f"10.252.{(os.getpid() % 40) * 6 + index % 6}"


def light_subnet(index: int) -> str:
    """A subnet of 10.253.x for a light testbed: the third octet a multiple of 16 (room for a /20)."""
    return f"10.253.{((os.getpid() + index) % 16) * 16}"


_chosen: list[str] = []  # `--subnet A.B.C`: the testbeds of this run take A.B.C, A.B.C+16, ... in turn


def use_subnets(first: str) -> None:
    """Give this run's testbeds the /20 blocks from FIRST (A.B.C, C a multiple of 16) on, one each, in turn."""
    octets = first.split(".")
    if len(octets) != 3 or not all(o.isdigit() and int(o) < 256 for o in octets) or int(octets[2]) % 16:
        raise SystemExit(f"--subnet {first}: three octets A.B.C, the third a multiple of 16 (e.g. 10.253.16)")
    a, b, c = (int(o) for o in octets)
    _chosen[:] = [f"{a}.{b}.{third}" for third in range(c, 256, 16)]


def _subnet(index: int, light: bool) -> str:
    if _chosen:
        return _chosen.pop(0)
    return light_subnet(index) if light else bench_subnet(index)


APPLY_ATTEMPTS = 3  # the first apply again for nodes it could not reach (exit 1 names them)


class BenchTestbed:
    """A bare testbed of N compute nodes + ctl, converged by our apply; its desired state lives in /tmp.

    The desired state is copied out of Git's reach (a work tree would put the commit, which others change,
    into every file header) as `<tmp>/desired-state`, with a cgroup.conf added.
    """

    def __init__(self, computes: int, index: int, *, light: bool = False) -> None:
        self.computes = computes
        self.light = light  # the light profile: sshd only, no Slurm (`testbed up --light`, not --bare)
        self.name = bench_name(index)
        self.subnet = _subnet(index, light)
        self.work = Path(tempfile.mkdtemp(prefix=f"reconciler-bench-{self.name}-"))
        self.desired = self.work / "desired-state"
        self._pids: dict[str, int] = {}

    @property
    def state_dir(self) -> Path:
        """The testbed's state directory (ssh_config, known_hosts, key)."""
        return BASE / self.name

    @property
    def known_hosts(self) -> Path:
        """The testbed's known_hosts."""
        return self.state_dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        """The testbed's ssh_config (a Host entry per node, ProxyCommand into its namespace)."""
        return self.state_dir / "ssh_config"

    @property
    def nodes(self) -> list[str]:
        """ctl and the compute nodes."""
        width = max(2, len(str(self.computes)))  # as the testbed names them: gpu01, or gpu001 from 100 on
        return ["ctl", *(f"gpu{i:0{width}d}" for i in range(1, self.computes + 1))]

    def launch(self) -> Path:
        """Bring the testbed up (bare, or light) and nothing more; return the desired state `up` wrote."""
        track(self.name)
        profile = "--light" if self.light else "--bare"
        log(f"testbed {self.name}: up {profile} --nodes {self.computes} --subnet {self.subnet}")
        up = timed_run([str(TESTBED), "up", profile, "--nodes", str(self.computes), "--name", self.name,
                        "--subnet", self.subnet], timeout=1800)
        if up.returncode != 0:
            raise RuntimeError(f"testbed up failed:\n{up.tail()}")
        log(f"testbed {self.name}: up in {up.seconds:.1f} s")
        return Path(up.stdout.strip().splitlines()[-1])

    def exec(self, node: str, command: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run a shell command inside a node through nsenter (no SSH), with a clean environment."""
        if not self._pids:
            self._pids = {k: int(v) for k, v in json.loads((self.state_dir / "state.json").read_text())["pids"].items()}
        argv = ["nsenter", "-t", str(self._pids[node]), "-a", "--", "/usr/bin/env", "-i", f"PATH={NODE_PATH}",
                "HOME=/root", "LANG=C.UTF-8", "/bin/sh", "-c", command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def up(self) -> None:
        """Bring the testbed up bare, copy its desired state and apply it (exit 0 required)."""
        source = self.launch()
        shutil.copytree(source, self.desired)
        cluster = self.desired / "cluster.yaml"
        text = cluster.read_text()
        marker = "  prolog: "
        if "cgroup:" not in text and marker in text:
            cluster.write_text(text.replace(marker, CGROUP_YAML + marker, 1))
        log(f"testbed {self.name}: first apply (from bare)")
        seconds = 0.0
        for attempt in range(1, APPLY_ATTEMPTS + 1):  # hundreds of nodes starting at once on 2 cores: a node may
            applied = timed_run(reconciler_argv("apply", str(self.desired), "--yes"), env=python_env(),  # time out
                                timeout=1800)
            seconds += applied.seconds
            if applied.returncode == 0:
                break
            log(f"testbed {self.name}: apply {attempt} exit {applied.returncode}: "
                f"{applied.tail(3).strip().splitlines()[-1] if applied.tail(3).strip() else ''}")
        else:
            raise RuntimeError(f"apply did not converge in {APPLY_ATTEMPTS} attempts:\n{applied.tail(40)}")
        log(f"testbed {self.name}: converged in {seconds:.1f} s ({attempt} apply run(s))")

    def down(self) -> None:
        """Tear the testbed down and remove the work directory."""
        _down(self.name)
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()
