"""Local testbed: a real multi-node Slurm cluster on one Linux machine (root, no Docker).

Each node is its own network namespace (a veth into a bridge that lives in a separate admin namespace, so
the host's own network is never touched), its own mount/UTS/IPC/PID namespaces, and a whole-root overlay
(lower layer: the host's ``/``; upper layer: the node's directory under the state dir) that it pivots into.
supervisord is PID 1 of every node and runs sshd, munged and slurmctld (on ``ctl``) or slurmd (on the
``gpuNN`` nodes); with ``--accounting`` also MariaDB and slurmdbd on ``ctl``. See README.md next to this file.
Standard library only: it runs before the project is installed.

This file is the command line (up, down, status, ssh, exec, reboot, deps). The work is in its sibling modules:
tb_base (error, log, run), tb_layout (names, addresses, state file, lock), tb_nodefs (files in a node's upper
layer, users), tb_services (hosts, sshd, supervisord, slurm.conf), tb_accounting (slurmdbd and MariaDB), tb_client
(ssh_config, known_hosts), tb_prepare (a node's whole upper layer), tb_net (namespaces, bridge, veths), tb_mounts
(root overlays, Lustre stand-in), tb_nodes (starting nodes, liveness, readiness, nsenter), tb_teardown, tb_up.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import package_repo  # noqa: E402  (sibling modules, path set above)
import reboot  # noqa: E402
import slurm_root  # noqa: E402
from tb_base import TestbedError, log  # noqa: E402
from tb_layout import BASE, DEFAULT_NAME, DEFAULT_SUBNET, Layout, locked  # noqa: E402
from tb_nodes import (  # noqa: E402
    PORT_MARIADB,
    PORT_SLURMCTLD,
    PORT_SLURMD,
    PORT_SLURMDBD,
    PORT_SSH,
    is_up,
    listening_ports,
    node_alive,
    nsenter_argv,
)
from tb_teardown import teardown  # noqa: E402
from tb_up import cmd_up, release_root  # noqa: E402

DEBIAN_PACKAGES = ["openssh-server", "openssh-client", "munge", "slurmctld", "slurmd", "slurm-client",
                   "supervisor", "iproute2", "netcat-openbsd", "squashfs-tools", "nfs-kernel-server",
                   "python3-clustershell",  # ClusterShell for the nodes' python3: testbed nodes as gateways
                   "slurmdbd", "mariadb-server",  # `up --accounting`: slurmdbd and its MariaDB on ctl
                   "gcc", "libc6-dev", "libslurm-dev",  # `up` compiles the Pyxis stand-in (pyxis_standin.py)
                   # `up --packages`: the package repository (package_repo.py), Debian's dnf and rpm on the nodes
                   "dnf", "dnf-plugins-core", "rpm", "createrepo-c", "dpkg-dev", "gnupg",
                   "debootstrap"]  # `up --slurm R`: the roots of the releases the host does not have (slurm_root.py)
# Not for the nodes: what the tests use beside the testbed (the status page in a headless browser, promtool for
# the alert rules, systemd-analyze for the unit, sudo and visudo for the shipped sudoers rule).
TEST_PACKAGES = ["chromium", "prometheus", "systemd", "sudo"]


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
    up = [p.name for p in BASE.iterdir() if p.is_dir() and is_up(p.name)] if BASE.is_dir() else []
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
    for release in slurm_root.other_releases():  # `up --slurm RELEASE` for each release the host does not have
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
