"""What the nodes' services read: /etc/hosts, sshd_config, supervisord's programs, slurm.conf and gres.conf."""

from __future__ import annotations

import desired_state
import package_repo
from tb_layout import GPUS_PER_NODE, NODE_CPUS, NODE_MEMORY_MB, TESTBED_LIB, Layout


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


# When the light controller's stand-in slurmctld last (re)read its files: written at preparation (its "start"),
# touched by each `scontrol reconfigure` (what a re-executing slurmctld's BOOT_TIME does from 23.11 on).
LIGHT_STANDIN_BOOT = "var/lib/reconciler-testbed/standin-slurmctld-boot"

LIGHT_SLURM_STANDIN = """#!/bin/sh
# STAND-IN for {command} on a light testbed node (no Slurm daemons). It answers what a ready slurmctld answers
# to the questions the reconciler asks: `scontrol ping` (UP), `scontrol show config` (BOOT_TIME: when the
# stand-in last (re)read its files, moved by `scontrol reconfigure`), `scontrol show node -o NAME` (idle);
# anything else: nothing, successfully.
boot=/{boot}
if [ "{command}" = scontrol ]; then
    case "$1 $2" in
        "ping "*) echo "Slurmctld(primary) at ctl is UP" ;;
        "reconfigure "*) touch "$boot" ;;
        "show config") echo "BOOT_TIME               = $(date -r "$boot" +%Y-%m-%dT%H:%M:%S)" ;;
        "show node") if [ "$3" = -o ] && [ -n "$4" ]; then echo "NodeName=$4 State=IDLE"; fi ;;
    esac
fi
exit 0
"""
