"""`testbed up`: check the dependencies, prepare every node's layer, start the network and the nodes, wait."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import desired_state
import package_repo
import reboot
import slurm_root
from tb_accounting import accounting_password, init_mariadb_datadir
from tb_base import TestbedError, log, run, trace
from tb_client import write_client_files
from tb_layout import BASE, GPUS_PER_NODE, NARROW_MAX, NODE_CPUS, NODE_MEMORY_MB, Layout, locked, validate_layout
from tb_mounts import mount_lustre, mount_roots
from tb_net import network_up, testbed_netns
from tb_nodefs import lower_root, use_lower
from tb_nodes import NODE_PYTHON, node_alive, node_ready, nsenter, running, start_nodes, wait_ready
from tb_prepare import prepare_node
from tb_teardown import teardown

HERE = Path(__file__).resolve().parent


REQUIRED_BINARIES = ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen", "/usr/sbin/munged",
                     "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sinfo", "/usr/bin/supervisord",
                     "/usr/sbin/ip", "/usr/bin/nc", "/usr/bin/mksquashfs", "/usr/sbin/exportfs",
                     "/usr/bin/nsenter", NODE_PYTHON]
# --packages: the host builds and signs the repository; the nodes need dnf only on the host's release (a built
# root has apt only: its nodes are offered the deb repository, the rpm one is served but no node reads it)
PACKAGES_BINARIES = ["/usr/bin/dpkg-scanpackages", "/usr/bin/createrepo_c", "/usr/bin/rpmbuild", "/usr/bin/rpmsign",
                     "/usr/bin/gpg"]
PACKAGES_NODE_BINARIES = ["/usr/bin/dnf"]
HOST_BINARIES = ["/usr/bin/ssh", "/usr/bin/ssh-keygen", "/usr/sbin/ip", "/usr/bin/nc", "/usr/bin/nsenter",
                 NODE_PYTHON, "/usr/sbin/debootstrap"]  # what the host runs itself, whichever release the nodes run
ACCOUNTING_BINARIES = ["/usr/sbin/slurmdbd", "/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db",
                       "/usr/bin/mariadb-admin", "/usr/bin/sacctmgr"]


def require_root_and_deps(accounting: bool = False, packages: bool = False, root: Path = Path("/")) -> None:
    """Fail early when not root or a needed binary is missing (ACCOUNTING: slurmdbd and MariaDB too; PACKAGES:
    the repository tools and the fetched Debian packages). The nodes' binaries are looked for in ROOT, their
    lower layer; the host needs its own ssh, ip, nc, nsenter and python3 whatever the release."""
    if os.geteuid() != 0:
        raise TestbedError("must run as root (namespaces, mounts)")
    needed = REQUIRED_BINARIES + (ACCOUNTING_BINARIES if accounting else [])
    needed += PACKAGES_NODE_BINARIES if packages and root == Path("/") else []
    missing = [b for b in needed if not (root / b.lstrip("/")).exists()]
    missing += [b for b in PACKAGES_BINARIES if packages and not os.path.exists(b)]
    missing += [b for b in HOST_BINARIES if root != Path("/") and not os.path.exists(b)]
    if missing:
        raise TestbedError(f"missing {', '.join(missing)}: run `{HERE / 'testbed'} deps` first")
    if packages:
        try:
            package_repo.fetched_debs()
        except package_repo.RepoError as e:
            raise TestbedError(str(e)) from e


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
    if release != slurm_root.host_release() and args.light:
        raise TestbedError(f"--light runs on the host's Slurm release "
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
                              BASE / "cache", lower_root()) if layout.packages else None
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
