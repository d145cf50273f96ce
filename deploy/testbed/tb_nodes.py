"""Running nodes: starting each node's PID 1 (node_init.py), telling whether it is alive and ready, nsenter."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import node_init
import package_repo
from tb_base import TestbedError, trace
from tb_client import client_file_binds
from tb_layout import GPUS_PER_NODE, Layout
from tb_nodefs import ids, lower_root, use_lower

HERE = Path(__file__).resolve().parent


PATH = node_init.PATH
NODE_PYTHON = "/usr/bin/python3"
PORT_SSH, PORT_SLURMCTLD, PORT_SLURMD, PORT_SLURMDBD, PORT_MARIADB = 22, 6817, 6818, 6819, 3306


def start_node(layout: Layout, node: str) -> subprocess.Popen[str]:
    """Launch a node's bootstrap; it prints the host PID of the node's PID 1."""
    if lower_root() != Path(layout.lower):  # the reboot keeper's process starts nodes too
        use_lower(Path(layout.lower))
    spec = {"name": layout.name, "node": node, "state": str(layout.state), "ip": layout.ip(node),
            "prefixlen": layout.prefixlen, "gpus": 0 if node == "ctl" else GPUS_PER_NODE,
            "sys_module": node != "ctl" and not layout.light,  # the modprobe stand-in's tmpfs /sys/module
            "fresh_boot": not layout.light,  # boot clock from zero and a new STAND-IN boot id (reboot.py)
            "boot_copies": package_repo.boot_copies() if node != "ctl" and not layout.light else {},
            "peers": [] if layout.light else layout.nodes, "light": layout.light, "mount_root": layout.light,
            "binds": client_file_binds(layout) if layout.light else {},
            "marker": layout.marker(node), "console": str(layout.node_dir(node) / "console.log"),
            "munge_uid": ids("munge")[0], "munge_gid": ids("munge")[1],
            "run_dirs": [["mysqld", 0o755, *ids("mysql")]] if layout.accounting and node == "ctl" else []}
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
    if not pid or not pid_alive(pid):
        return True
    for _ in range(20):
        marker = environ_marker(pid)
        if marker == layout.marker(node):
            return False
        if marker is not None and marker != "":
            return True
        time.sleep(0.05)
    return not pid_alive(pid) or environ_marker(pid) != layout.marker(node)


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


def pid_alive(pid: int) -> bool:
    """Whether PID exists and is not a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def is_up(name: str) -> bool:
    """Whether any node of testbed NAME is alive."""
    layout = Layout.load(name)
    return layout is not None and any(node_alive(layout, n) for n in layout.nodes)


def running(layout: Layout) -> bool:
    """Whether every node of a saved testbed is alive."""
    return bool(layout.pids) and all(node_alive(layout, n) for n in layout.nodes)
