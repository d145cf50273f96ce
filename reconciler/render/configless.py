"""Configless Slurm (`cluster.mode: configless`): who gets the Slurm files, and how slurmd finds the controller.

In configless mode slurm.conf, gres.conf and cgroup.conf live on the controllers only (with
`SlurmctldParameters=enable_configless`); every other node of a node set runs slurmd with
`--conf-server CTL[:PORT][,CTL2[:PORT]]`, which fetches the files from slurmctld and caches them (Slurm 22.05:
under `/run/slurm/conf`, where client commands on that node find them too). slurmd prefers a local slurm.conf
when one exists, so such nodes must not hold one. Nodes that run Slurm without slurmd (a login node outside
every node set) keep the files: client commands need them (or DNS SRV records, or sackd from 23.11).
"""

from __future__ import annotations

import re

from reconciler.desired.inventory import slurm_node_set
from reconciler.model import Cluster, DesiredState
from reconciler.render.common import header

ENABLE = "enable_configless"
# Where the node's service manager reads how to start slurmd.
SYSTEMD_DROPIN = "/etc/systemd/system/slurmd.service.d/reconciler-configless.conf"
SUPERVISORD_PROGRAM = "/etc/supervisor/conf.d/slurmd.conf"


def is_client(state: DesiredState, node: str) -> bool:
    """True for a node that runs slurmd configless: configless mode, in a node set, not a controller."""
    cluster = state.cluster
    return (cluster.mode == "configless" and node in slurm_node_set(state)
            and node not in cluster.controller_names)


def ctld_parameters(value: object | None) -> str:
    """SlurmctldParameters with `enable_configless` merged into the admin's list (kept as written)."""
    items = [] if value is None else [i for i in str(value).split(",") if i]
    if not any(i.strip().lower() == ENABLE for i in items):
        items.append(ENABLE)
    return ",".join(items)


def conf_server(cluster: Cluster) -> str:
    """slurmd's `--conf-server` value: each controller's address (or name) with SlurmctldPort when set."""
    port = cluster.slurm_conf.get("SlurmctldPort")
    first = re.match(r"\d+", str(port)) if port is not None else None
    suffix = f":{first.group(0)}" if first else ""
    hosts = []
    for entry in cluster.controllers:
        name, _, address = entry.partition("(")
        hosts.append(f"{address.rstrip(')') or name}{suffix}")
    return ",".join(hosts)


def systemd_dropin(cluster: Cluster, source: str) -> str:
    """The slurmd.service drop-in: `SLURMD_OPTIONS=--conf-server ...`, and no need for a local slurm.conf.

    Debian's (and RHEL's) slurmd.service starts `slurmd ... $SLURMD_OPTIONS`; Debian's also has
    `ConditionPathExists=/etc/slurm/slurm.conf`, which the empty assignment resets. A SLURMD_OPTIONS set in
    /etc/default/slurmd (EnvironmentFile=) overrides this one: leave it unset there.
    """
    return (header("slurmd.service drop-in for configless Slurm", source)
            + "[Unit]\n"
            "# slurm.conf comes from slurmctld (--conf-server), not from a local file\n"
            "ConditionPathExists=\n\n"
            "[Service]\n"
            f'Environment="SLURMD_OPTIONS=--conf-server {conf_server(cluster)}"\n')


def supervisord_program(cluster: Cluster, source: str) -> str:
    """supervisord's program for slurmd, started with `--conf-server ...` (the only [program:slurmd] wanted)."""
    return (header("supervisord program for slurmd (configless Slurm)", source)
            + "[program:slurmd]\n"
            f"command=/usr/sbin/slurmd -D --conf-server {conf_server(cluster)}\n"
            "autostart=true\nautorestart=true\npriority=30\nstartsecs=1\nstartretries=10\nstopwaitsecs=10\n"
            "redirect_stderr=true\nstdout_logfile=/var/log/supervisor/slurmd.log\n"
            "stdout_logfile_maxbytes=1MB\nstdout_logfile_backups=1\n")
