"""A node's upper layer as `up` prepares it: SSH keys, the services' config, users, stand-ins, accounting."""

from __future__ import annotations

import os
from pathlib import Path

import desired_state
import modules_standin
import node_init
import package_repo
import pyxis_standin
import reboot
from tb_accounting import install_accounting
from tb_base import run
from tb_client import client_file_binds
from tb_layout import BASE, Layout
from tb_nodefs import ids, install_test_users, lower, lower_root, mirror_mkdir, opaque_dir, put, whiteout
from tb_services import (
    CONFIGLESS_PROGRAM_PATH,
    LIGHT_SLURM_STANDIN,
    LIGHT_STANDIN_BOOT,
    configless_program,
    gres_conf,
    hosts_file,
    slurm_conf,
    sshd_config,
    supervisor_conf,
)

HERE = Path(__file__).resolve().parent


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
            put(upper, f"usr/local/bin/{command}",
                LIGHT_SLURM_STANDIN.format(command=command, boot=LIGHT_STANDIN_BOOT), 0o755)
        put(upper, LIGHT_STANDIN_BOOT, "")
        return host_key_line
    # The host's sysctl settings are not the node's: `sysctl --system` on a node would try to set the host's
    # kernel.* keys, which a node may not write (node_init: /proc/sys read-only but net). Nodes start empty.
    for rel in ("etc/sysctl.d", "usr/lib/sysctl.d", "run/sysctl.d"):
        if not lower(rel).parent.is_symlink():
            opaque_dir(upper, rel, 0o755)
    if os.path.lexists(lower("etc/sysctl.conf")):
        whiteout(upper, "etc/sysctl.conf")
    munge = ids("munge")
    put(upper, "etc/munge/munge.key", munge_key, 0o400, munge)
    put(upper, "etc/supervisor/conf.d/testbed.conf", supervisor_conf(layout, node))
    if layout.configless and not layout.bare and node != "ctl":
        put(upper, CONFIGLESS_PROGRAM_PATH, configless_program(layout))
    slurm = ids("slurm")
    for rel in ("var/lib/slurm/slurmctld", "var/lib/slurm/slurmd", "var/log/slurm"):
        os.chown(mirror_mkdir(upper, rel), *slurm)
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


def install_standins(upper: Path) -> None:
    """Put the testbed-only mount.nfs, mount.lustre, enroot, all_reduce_perf and Pyxis stand-ins into a node."""
    put(upper, "usr/sbin/mount.nfs", (HERE / "standins" / "mount.nfs").read_bytes(), 0o755)
    put(upper, "usr/sbin/mount.lustre", (HERE / "standins" / "mount.lustre").read_bytes(), 0o755)
    put(upper, "usr/bin/enroot", (HERE / "standins" / "enroot").read_bytes(), 0o755)
    put(upper, "usr/local/bin/all_reduce_perf", (HERE / "standins" / "all_reduce_perf").read_bytes(), 0o755)
    pkg = (HERE / "standins" / "pkg_resources.py").read_bytes()
    put(upper, f"{node_init.NODE_PYLIB.lstrip('/')}/pkg_resources.py", pkg)
    for rel, (data, mode) in pyxis_standin.files(BASE / "cache", lower_root()).items():
        put(upper, rel, data, mode)


def install_package_sources(upper: Path, repo: package_repo.Repository) -> None:
    """--packages: apt's only source and dnf's repository are the testbed's (package_repo.node_layer)."""
    edits = package_repo.node_layer(repo, lower_root())
    for rel in edits.opaque:
        opaque_dir(upper, rel, 0o755)
    for rel in edits.mirror_dirs:
        mirror_mkdir(upper, rel)
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
