"""Bootstrap of one testbed node: new namespaces, private mounts, pivot_root, then supervisord as PID 1.

Run by ``tb_nodes.start_node`` on the host, already inside the node's network namespace (``nsenter --net``):

    python3 node_init.py '<json spec>'

The process unshares mount/UTS/IPC/PID namespaces, forks the node's PID 1, prints that child's host PID on
stdout and exits. The child prepares the node's root (an overlay mounted by the host: lower layer is the
host's ``/``, upper layer is the node's own directory), mounts private /proc, /sys, /dev, /run, /tmp,
configures the node's network interface, pivots into the root and execs supervisord, which reaps orphans
as PID 1 and runs sshd, munged and the Slurm daemons. A light node (``"light": true``) execs LIGHT_INIT
instead: a shell that runs sshd in the foreground, restarts it if it dies, and reaps orphans while it waits.
Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback
import uuid

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWTIME = 0x00000080

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = 155  # x86_64

NVIDIA_MAJOR = 195
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NODE_PYLIB = "/usr/lib/reconciler-testbed/python"  # the pkg_resources stand-in that keeps supervisord small
# PID 1 of a light node: dash (0.1 MiB, against supervisord's 14) waits for its foreground sshd with
# wait3(-1), so it also reaps the orphans reparented to it; sshd -D -e logs to the node's console.log.
LIGHT_INIT = "while :; do /usr/sbin/sshd -D -e; echo \"sshd exited $?, restarting\"; sleep 1; done"

libc = ctypes.CDLL(None, use_errno=True)


def check(ret: int, what: str) -> None:
    """Raise OSError with errno when a libc call failed."""
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(text: str | None) -> bytes | None:
    """Encode an optional C string argument."""
    return text.encode() if text is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:  # noqa: E501
    """Call mount(2)."""
    ret = libc.mount(_enc(source), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data))
    check(ret, f"mount {source} on {target}")


def umount2(target: str, flags: int = 0) -> None:
    """Call umount2(2)."""
    check(libc.umount2(target.encode(), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """Call pivot_root(2)."""
    check(libc.syscall(SYS_PIVOT_ROOT, new_root.encode(), put_old.encode()), "pivot_root")


def _mknod_chr(path: str, major: int, minor: int, mode: int = 0o666) -> None:
    """Create a character device node."""
    os.mknod(path, 0o020000 | mode, os.makedev(major, minor))


def setup_dev(root: str, gpus: int) -> None:
    """Mount a private /dev with the basic devices, devpts, shm and fake NVIDIA GPUs."""
    dev = f"{root}/dev"
    mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=1m")
    for name, major, minor in (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8),
                               ("urandom", 1, 9), ("tty", 5, 0)):
        _mknod_chr(f"{dev}/{name}", major, minor)
    for i in range(gpus):
        _mknod_chr(f"{dev}/nvidia{i}", NVIDIA_MAJOR, i)
    if gpus:
        _mknod_chr(f"{dev}/nvidiactl", NVIDIA_MAJOR, 255)
    os.mkdir(f"{dev}/pts", 0o755)
    pts_opts = "newinstance,ptmxmode=0666,mode=0620,gid=5"
    mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, pts_opts)
    os.symlink("pts/ptmx", f"{dev}/ptmx")
    os.mkdir(f"{dev}/shm", 0o1777)
    mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")


def setup_run(root: str, peers: list[str], state: str, munge_uid: int, munge_gid: int,
              run_dirs: list[tuple[str, int, int, int]] | None = None) -> None:
    """Mount private /run and /tmp; bind every node's root (mount.nfs stand-in) and the Lustre file systems."""
    mount("tmpfs", f"{root}/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
    mount("tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for sub, mode in (("sshd", 0o755), ("lock", 0o1777), ("munge", 0o755)):
        os.mkdir(f"{root}/run/{sub}", mode)
        os.chmod(f"{root}/run/{sub}", mode)
    os.chown(f"{root}/run/munge", munge_uid, munge_gid)
    for sub, mode, uid, gid in run_dirs or []:  # e.g. /run/mysqld for MariaDB on ctl (testbed --accounting)
        os.mkdir(f"{root}/run/{sub}", mode)
        os.chmod(f"{root}/run/{sub}", mode)
        os.chown(f"{root}/run/{sub}", uid, gid)
    roots = f"{root}/run/reconciler-testbed/roots"
    os.makedirs(roots, 0o755)
    for peer in peers:
        os.mkdir(f"{roots}/{peer}", 0o755)
        mount(f"{state}/nodes/{peer}/root", f"{roots}/{peer}", None, MS_BIND)
    if os.path.isdir(f"{state}/lustre"):  # the mount.lustre stand-in's file systems (see tb_mounts.mount_lustre)
        os.makedirs(f"{root}/run/reconciler-testbed/lustre", 0o755)
        mount(f"{state}/lustre", f"{root}/run/reconciler-testbed/lustre", None, MS_BIND | MS_REC)


def setup_net(ip: str, prefixlen: int) -> None:
    """Bring up lo and eth0 with the node's address (no default route)."""
    batch = f"link set lo up\naddr replace {ip}/{prefixlen} dev eth0\nlink set eth0 up\n"  # replace: a reboot
    subprocess.run(["/usr/sbin/ip", "-batch", "-"], input=batch.encode(), check=True)


def setup_cgroup(root: str) -> None:
    """Give slurmd 22.05 the cgroup view its cgroup plugin insists on initialising, and no more.

    On a cgroup v1 host: a read-only tmpfs with only the name=systemd hierarchy bound in (slurmd picks
    cgroup/v1 and only checks that hierarchy; with proctrack/linuxproc and task/none it creates nothing).
    On a cgroup v2 host: the unified hierarchy, bound.
    """
    cgroup = f"{root}/sys/fs/cgroup"
    if os.path.isdir("/sys/fs/cgroup/systemd") and os.path.ismount("/sys/fs/cgroup/systemd"):
        mount("cgroup", cgroup, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755")
        os.mkdir(f"{cgroup}/systemd", 0o755)
        mount("/sys/fs/cgroup/systemd", f"{cgroup}/systemd", None, MS_BIND)
        mount(None, cgroup, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    elif os.path.ismount("/sys/fs/cgroup"):
        mount("/sys/fs/cgroup", cgroup, None, MS_BIND)


def protect_proc_sys(root: str) -> None:
    """Make the node's /proc/sys read-only except /proc/sys/net: a node is real root, and only net.* sysctls
    belong to its network namespace; writing vm.* or kernel.* there would change the HOST's kernel."""
    mount(f"{root}/proc/sys/net", f"{root}/proc/sys/net", None, MS_BIND)  # stays writable, under the next
    mount(f"{root}/proc/sys", f"{root}/proc/sys", None, MS_BIND | MS_REC)
    mount(None, f"{root}/proc/sys", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def bind_boot_id(root: str, node_dir: str) -> None:
    """STAND-IN boot id: nodes share the host's kernel (one /proc/sys/kernel/random/boot_id), so each node boot
    writes a new random UUID to <node dir>/boot_id and binds it, read-only, over the node's boot_id."""
    text = f"{uuid.uuid4()}\n"
    tmp = f"{node_dir}/boot_id.tmp"
    with open(tmp, "w", encoding="ascii") as handle:
        handle.write(text)
    os.chmod(tmp, 0o444)
    os.replace(tmp, f"{node_dir}/boot_id")  # a new inode per boot: the last boot's bind never sees it
    target = f"{root}/proc/sys/kernel/random/boot_id"
    mount(f"{node_dir}/boot_id", target, None, MS_BIND)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def copy_boot_files(root: str, copies: dict[str, str]) -> None:
    """At boot, copy each installed directory SRC to DST (in the fresh /run): what a boot loads, e.g. the
    driver stand-in's files (deploy/testbed/package_repo.py), read by the stand-in nvidia-smi until the next."""
    for src, dst in copies.items():
        if os.path.isdir(f"{root}{src}"):
            shutil.copytree(f"{root}{src}", f"{root}{dst}")


def fresh_boot_clock() -> None:
    """Give the node's processes (the time namespace made by unshare) a boot clock that starts now: uptime, the
    boot time in /proc/stat and sysinfo() then say the node just booted (slurmd reports it to slurmctld, which
    waits for a newer boot time after `scontrol reboot`). Only CLOCK_BOOTTIME moves; wall time is the host's."""
    booted = int(time.clock_gettime(time.CLOCK_BOOTTIME))
    with open("/proc/self/timens_offsets", "w", encoding="ascii") as handle:
        handle.write(f"boottime {-booted} 0\n")


def setup_root(spec: dict) -> None:
    """Prepare mounts and network of the node, then pivot into its root."""
    node_dir = f"{spec['state']}/nodes/{spec['node']}"
    root = f"{node_dir}/root"
    if spec.get("mount_root"):  # light nodes: the overlay lives in this mount namespace only, never the host's
        opts = f"lowerdir=/,upperdir={node_dir}/upper,workdir={node_dir}/work"
        mount(f"{spec['node']}:/", root, "overlay", 0, opts)
    for source, target in spec.get("binds", {}).items():  # read-only host files at paths the upper layer made
        mount(source, f"{root}{target}", None, MS_BIND)
        mount(None, f"{root}{target}", None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    socket.sethostname(spec["node"])
    mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if spec.get("fresh_boot"):  # before protect_proc_sys: its recursive bind keeps this mount
        bind_boot_id(root, node_dir)
    protect_proc_sys(root)
    mount("sysfs", f"{root}/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if spec.get("sys_module"):  # the modprobe stand-in's modules (deploy/testbed/modules_standin.py)
        mount("tmpfs", f"{root}/sys/module", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=1m")
    if not spec.get("light"):
        setup_cgroup(root)
    setup_dev(root, spec["gpus"])
    setup_run(root, spec["peers"], spec["state"], spec["munge_uid"], spec["munge_gid"], spec.get("run_dirs"))
    copy_boot_files(root, spec.get("boot_copies", {}))
    setup_net(spec["ip"], spec["prefixlen"])
    os.chdir(root)
    pivot_root(".", ".")
    umount2(".", MNT_DETACH)
    os.chdir("/")


def exec_supervisord(marker: str) -> None:
    """Replace this process (the node's PID 1) by supervisord in the foreground."""
    env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "RECONCILER_TESTBED": marker,
           "PYTHONPATH": NODE_PYLIB}
    os.umask(0o022)
    os.closerange(3, 1024)
    os.execve("/usr/bin/supervisord",
              ["supervisord", "-n", "-c", "/etc/supervisor/supervisord.conf"], env)


def exec_light_init(marker: str) -> None:
    """Replace this process (a light node's PID 1) by the LIGHT_INIT shell loop around sshd."""
    env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "RECONCILER_TESTBED": marker}
    os.umask(0o022)
    os.closerange(3, 1024)
    os.execve("/bin/sh", ["sh", "-c", LIGHT_INIT], env)


def main() -> None:
    """Unshare, fork PID 1, report its host PID and let it boot the node."""
    spec = json.loads(sys.argv[1])
    fresh = CLONE_NEWTIME if spec.get("fresh_boot") else 0
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | fresh), "unshare")
    if fresh:  # before the fork: the offsets can only be set while no process is in the new namespace
        fresh_boot_clock()
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        os._exit(0)
    try:
        log = os.open(spec["console"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.umask(0)
        setup_root(spec)
        if spec.get("light"):
            exec_light_init(spec["marker"])
        exec_supervisord(spec["marker"])
    except BaseException:  # noqa: BLE001 - PID 1 must report and exit, whatever failed
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
