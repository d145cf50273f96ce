"""What a Slurm configuration change needs: `scontrol reconfigure`, or restarts, by Slurm version family."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache

from reconciler import hostlist

# Never applied by reconfigure, in any version (listening ports, auth, where state lives).
ALWAYS_RESTART = frozenset({
    "SlurmctldHost", "ControlMachine", "SlurmctldPort", "SlurmdPort", "AuthType", "AuthAltTypes", "CredType",
    "SlurmUser", "SlurmdUser", "StateSaveLocation", "SlurmdSpoolDir", "PluginDir", "ClusterName",
    "SlurmctldParameters", "CommunicationParameters",
})
# Before 23.11, `scontrol reconfigure` left these unapplied until the daemons restarted.
RESTART_BEFORE_23_11 = frozenset({
    "SelectType", "SelectTypeParameters", "SwitchType", "ProctrackType", "TaskPlugin", "GresTypes",
    "JobAcctGatherType", "JobAcctGatherParams", "AccountingStorageType", "AccountingStorageHost",
    "JobCompType", "MpiDefault", "PrologFlags", "LaunchParameters", "SlurmdParameters", "TopologyPlugin",
    "PriorityType", "SchedulerType", "PreemptType", "SlurmctldPidFile", "SlurmdPidFile", "TreeWidth",
    "KeepAliveTime", "MessageTimeout",
})
# Keys of a NodeName= line that slurmd reads at start (hardware and GRES).
NODE_RESTART_KEYS = frozenset({"CPUs", "Boards", "Sockets", "SocketsPerBoard", "CoresPerSocket",
                               "ThreadsPerCore", "RealMemory", "Gres", "CpuSpecList", "MemSpecLimit"})


def version_tuple(family: str) -> tuple[int, int]:
    """`23.11` -> (23, 11)."""
    major, minor = family.split(".")[:2]
    return int(major), int(minor)


@dataclass
class SlurmConf:
    """slurm.conf split into global keys, node definitions and partitions."""

    globals: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)  # node name -> its NodeName= params
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)


def _pairs(line: str) -> dict[str, str]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    out = {}
    for word in words:
        key, _, value = word.partition("=")
        out[key] = value
    return out


def parse_slurm_conf(text: str) -> SlurmConf:
    """Parse slurm.conf text into its parts (comments and blank lines ignored)."""
    conf = SlurmConf()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip() if not re.search(r'"[^"]*#', raw) else raw.strip()
        if not line or "=" not in line:
            continue
        pairs = _pairs(line)
        first = next(iter(pairs), "")
        if first.lower() == "nodename" and pairs[first] != "DEFAULT":
            params = {k: v for k, v in pairs.items() if k.lower() != "nodename"}
            for name in hostlist.expand(pairs[first]):
                conf.nodes[name] = params
        elif first.lower() == "partitionname":
            conf.partitions[pairs[first]] = {k: v for k, v in pairs.items() if k.lower() != "partitionname"}
        else:
            for key, value in pairs.items():
                conf.globals[key] = value
    return conf


@lru_cache(maxsize=16)
def _parsed(text: str) -> SlurmConf:
    """parse_slurm_conf, cached: a plan asks about the same two files once per node. Read-only results."""
    return parse_slurm_conf(text)


@dataclass
class Consequence:
    """What one node's configuration change needs."""

    reconfigure: bool = False
    restart_slurmctld: bool = False
    restart_all_slurmd: bool = False
    restart_slurmd_here: bool = False
    reasons: list[str] = field(default_factory=list)


def slurm_conf_consequence(before: str | None, after: str, family: str) -> Consequence:
    """Classify a slurm.conf change: which keys changed and what that takes in this version family."""
    result = Consequence()
    if before is None:
        result.restart_slurmctld = result.restart_all_slurmd = True
        result.reasons.append("slurm.conf is new")
        return result
    old, new = _parsed(before), _parsed(after)
    version = version_tuple(family)
    changed = {k for k in old.globals.keys() | new.globals.keys() if old.globals.get(k) != new.globals.get(k)}
    if not changed and old.nodes == new.nodes and old.partitions == new.partitions:
        return result
    result.reconfigure = True
    restart_keys = set(changed & ALWAYS_RESTART)
    if version < (23, 11):
        restart_keys |= changed & RESTART_BEFORE_23_11
    if restart_keys:
        result.restart_slurmctld = result.restart_all_slurmd = True
        result.reasons.append(f"{', '.join(sorted(restart_keys))} changed (needs restart in {family})")
    if set(old.nodes) != set(new.nodes) and version < (24, 11):
        result.restart_slurmctld = result.restart_all_slurmd = True
        added, removed = set(new.nodes) - set(old.nodes), set(old.nodes) - set(new.nodes)
        result.reasons.append(f"nodes added/removed ({hostlist.compress(added | removed)}) need restarts "
                              f"before 24.11")
    return result


def node_definition_changed(before: str | None, after: str, node: str) -> bool:
    """True when the node's own hardware/GRES definition changed (slurmd must restart to see it)."""
    if before is None:
        return False
    old = _parsed(before).nodes.get(node, {})
    new = _parsed(after).nodes.get(node, {})
    return any(old.get(k) != new.get(k) for k in NODE_RESTART_KEYS)
