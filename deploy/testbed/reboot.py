"""Reboot of a testbed node, as Slurm's `RebootProgram` asks for one (and `testbed reboot NODE`).

A node cannot restart its own PID 1, so the host does it. Every compute node of the full profile has REBOOT_PROGRAM
(slurm.conf's `RebootProgram`): it writes a request into the node's own root (REQUEST, in its upper layer: a node
can write there for itself only) and returns, as `reboot` does. The testbed's keeper (`reboot.py keep NAME`, started
by `testbed up`, killed by `testbed down` like every process that carries the testbed's marker) polls those files
and reboots the node under the testbed's lock:

- shutdown: SIGTERM to the node's supervisord, which stops its programs as an init does; SIGKILL after
  SHUTDOWN_TIMEOUT. When PID 1 is gone the kernel ends every process of its PID namespace; the keeper waits,
  bounded, until none is left.
- boot: node_init.py starts a new PID 1 from the same upper layer (the disk survives; /run, /tmp, /dev, /sys/module
  and every mount of the last boot are new), in a new time namespace whose boot clock starts at zero (uptime and
  slurmd's boot time say the node just booted) and with a new STAND-IN boot id. The keeper waits, bounded, until
  sshd, munged and slurmd listen again; slurmd then registers with slurmctld itself.

Standard library only, like the rest of deploy/testbed.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # the keeper: `python3 -I reboot.py keep NAME` puts no script directory on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from tb_layout import BASE, Layout, locked  # noqa: E402  (sibling modules)
from tb_nodes import NODE_PYTHON, PATH, node_alive, node_dead, node_ready, nsenter, pid_alive, start_node  # noqa: E402

BOOT_NOT_BEFORE = 2  # whole seconds after the reboot request (reboot_node says why)
REBOOT_PROGRAM = "/usr/lib/reconciler-testbed/reboot"  # in every compute node (slurm.conf RebootProgram)
REQUEST = "var/lib/reconciler-testbed/reboot-request"  # in a node's root: written by REBOOT_PROGRAM
POLL = 0.1  # seconds between the keeper's looks at the request files
SHUTDOWN_TIMEOUT = 15.0  # supervisord stops its programs (stopwaitsecs=10 each at most), then SIGKILL
GONE_TIMEOUT = 10.0  # after PID 1: every process of the node's PID namespace ended
BOOT_TIMEOUT = 60.0  # sshd, munged and slurmd listening again
KEEPER_LOG = "keeper.log"  # in the testbed's state directory
SLOW_SHUTDOWN = "slow-shutdown"  # in the testbed's state directory: seconds a shutdown spends with slurmd stopped

REBOOT_SCRIPT = f"""#!/bin/sh
# STAND-IN for reboot on a testbed node (written by deploy/testbed; slurm.conf RebootProgram): the node cannot
# restart its own PID 1, so this asks the testbed's keeper on the host (deploy/testbed/reboot.py) to do it, and
# returns, as reboot does. Every process of this node ends shortly after; the node boots again.
set -e
mkdir -p {Path('/' + REQUEST).parent}
printf '%s %s\\n' "$(date +%s)" "${{*:-reboot}}" > /{REQUEST}.tmp
mv /{REQUEST}.tmp /{REQUEST}
"""


class RebootError(Exception):
    """A reboot that did not finish, worth a one-line message."""


def files() -> dict[str, tuple[bytes, int]]:
    """Path in a compute node's upper layer -> (content, mode): the RebootProgram stand-in."""
    return {REBOOT_PROGRAM.lstrip("/"): (REBOOT_SCRIPT.encode(), 0o755)}


def request_path(layout: Layout, node: str) -> Path:
    """NODE's reboot request as the host sees it (through the node's root overlay)."""
    return layout.node_dir(node) / "root" / REQUEST


def boot_id(layout: Layout, node: str) -> str:
    """The STAND-IN boot id of NODE's current boot (node_init.bind_boot_id), or '' before its first."""
    try:
        return (layout.node_dir(node) / "boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_ns(pid: int) -> int | None:
    """Inode of PID's PID namespace."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _members(ns: int) -> list[int]:
    """Live processes in the PID namespace with inode NS."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and _pid_ns(int(e)) == ns and pid_alive(int(e))]


def _wait(done: object, timeout: float) -> bool:
    """Poll DONE() every 20 ms until true or TIMEOUT; return whether it became true."""
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def shutdown(layout: Layout, node: str) -> None:
    """End every process of NODE: SIGTERM to its PID 1, SIGKILL after SHUTDOWN_TIMEOUT; RebootError if any stays."""
    pid = layout.pids[node]
    if not node_alive(layout, node):
        return
    slow = _slow_shutdown(layout)
    if slow:  # as systemd's ordered stop: slurmd first, sshd still up, a while before the rest
        nsenter(layout, node, "supervisorctl stop slurmd", timeout=30)
        time.sleep(slow)
    ns = _pid_ns(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait(lambda: not pid_alive(pid), SHUTDOWN_TIMEOUT):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if ns is not None and not _wait(lambda: not _members(ns), GONE_TIMEOUT):
        raise RebootError(f"{node}: processes left after its PID 1 ended: {_members(ns)}")


def _slow_shutdown(layout: Layout) -> float:
    """Seconds a shutdown spends with slurmd stopped and sshd up, as a test asks in SLOW_SHUTDOWN (a real node's
    shutdown takes that long; ours none), or 0."""
    try:
        return max(0.0, float((layout.state / SLOW_SHUTDOWN).read_text().strip()))
    except (OSError, ValueError):
        return 0.0


def boot(layout: Layout, node: str) -> None:
    """Start NODE again (node_init.py), record its new PID 1 and wait until its daemons listen."""
    proc = start_node(layout, node)
    try:
        out, err = proc.communicate(timeout=BOOT_TIMEOUT)
    except Exception:
        proc.kill()
        raise
    if proc.returncode != 0 or not out.strip().isdigit():
        raise RebootError(f"{node} failed to boot: {err.strip()}")
    layout.pids[node] = int(out.strip())
    layout.save()
    if not _wait(lambda: node_ready(layout, node) or node_dead(layout, node), BOOT_TIMEOUT):
        raise RebootError(f"{node}: daemons not listening {BOOT_TIMEOUT:.0f}s after boot; see "
                          f"{layout.node_dir(node) / 'console.log'}")
    if not node_ready(layout, node):
        raise RebootError(f"{node} died while booting; see {layout.node_dir(node) / 'console.log'}")


def reboot_node(name: str, node: str) -> tuple[str, float]:
    """Reboot NODE of testbed NAME under the testbed's lock; return its new boot id and the seconds it took."""
    with locked(name):
        layout = Layout.load(name)
        if layout is None or node not in layout.nodes:
            raise RebootError(f"no node {node} in testbed {name}")
        if layout.light or node == "ctl":
            raise RebootError(f"{node}: only compute nodes of a full testbed reboot (not ctl, not --light)")
        started, asked = time.monotonic(), time.time()
        request_path(layout, node).unlink(missing_ok=True)  # through the overlay: the next boot sees none
        shutdown(layout, node)
        # slurmctld takes a rebooted node's registration only when its boot time (now - uptime, whole seconds) is
        # later than the reboot request: a node back within the same second was ignored, left `REBOOT_ISSUED`
        # until ResumeTimeout. A real reboot takes minutes; this one boots no sooner than the second after next.
        time.sleep(max(0.0, math.floor(asked) + BOOT_NOT_BEFORE - time.time()))
        boot(layout, node)
        return boot_id(layout, node), time.monotonic() - started


def _log(layout_state: Path, message: str) -> None:
    """One line in the keeper's log."""
    with open(layout_state / KEEPER_LOG, "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")


def keep(name: str) -> int:
    """The keeper: reboot each compute node that asks (REQUEST), until the testbed is gone."""
    while True:
        layout = Layout.load(name)
        if layout is None:
            return 0
        for node in layout.compute_nodes:
            request = request_path(layout, node)
            if not request.exists():
                continue
            why = request.read_text(errors="replace").strip()
            _log(layout.state, f"{node}: reboot requested ({why})")
            try:
                new_id, took = reboot_node(name, node)
                _log(layout.state, f"{node}: booted in {took:.2f}s, boot id {new_id}")
            except (RebootError, OSError) as e:
                _log(layout.state, f"{node}: reboot failed: {e}")
                with contextlib.suppress(OSError):
                    request.unlink()
        time.sleep(POLL)


def start_keeper(layout: Layout) -> int:
    """Start the keeper of LAYOUT's testbed, detached, carrying the testbed's marker (`down` kills it)."""

    log = open(layout.state / KEEPER_LOG, "a", encoding="utf-8")  # noqa: SIM115 - handed to the child
    with log:
        proc = subprocess.Popen([NODE_PYTHON, "-I", str(Path(__file__).resolve()), "keep", layout.name],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                env={"PATH": PATH, "RECONCILER_TESTBED": f"{layout.name}/keeper",
                                     "RECONCILER_TESTBED_BASE": str(BASE)})
    return proc.pid


def main(argv: list[str]) -> int:
    """`reboot.py keep NAME`: run the keeper of testbed NAME."""
    if len(argv) != 2 or argv[0] != "keep":
        print("usage: reboot.py keep NAME", file=sys.stderr)
        return 2
    return keep(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
