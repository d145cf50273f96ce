"""What a Slurm configuration change needs: `scontrol reconfigure`, or restarts, by Slurm version family."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache

from reconciler import hostlist
from reconciler import params as slurm_params

RESTARTS_SLURMCTLD = frozenset({"restart_slurmctld", "restart_all"})
RESTARTS_SLURMD = frozenset({"restart_slurmd", "restart_all"})


def change_kind(key: str, family: str, scope: str = "global") -> str:
    """What a change of a slurm.conf key needs in this release family, from the parameter tables.

    Keys the tables do not know (site plugin keys under `extra`) are taken at `scontrol reconfigure`.
    """
    if slurm_params.lookup("slurm.conf", key, scope) is None:
        return "reconfigure"
    return slurm_params.change_kind("slurm.conf", key, family, scope)


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
    changed = {k for k in old.globals.keys() | new.globals.keys() if old.globals.get(k) != new.globals.get(k)}
    if not changed and old.nodes == new.nodes and old.partitions == new.partitions:
        return result
    result.reconfigure = True
    kinds = {key: change_kind(key, family) for key in sorted(changed)}
    ctld = [k for k, kind in kinds.items() if kind in RESTARTS_SLURMCTLD]
    slurmd = [k for k, kind in kinds.items() if kind in RESTARTS_SLURMD]
    both = [k for k in ctld if k in slurmd]
    result.restart_slurmctld = bool(ctld)
    result.restart_all_slurmd = bool(slurmd)
    if both:
        result.reasons.append(f"{', '.join(both)} changed (needs restart in {family})")
    if only := [k for k in ctld if k not in both]:
        result.reasons.append(f"{', '.join(only)} changed (needs a slurmctld restart in {family})")
    if only := [k for k in slurmd if k not in both]:
        result.reasons.append(f"{', '.join(only)} changed (needs slurmd restarts in {family})")
    if set(old.nodes) != set(new.nodes):
        kind = change_kind("NodeName", family, "node")
        result.restart_slurmctld |= kind in RESTARTS_SLURMCTLD
        result.restart_all_slurmd |= kind in RESTARTS_SLURMD
        if kind != "reconfigure":
            added, removed = set(new.nodes) - set(old.nodes), set(old.nodes) - set(new.nodes)
            result.reasons.append(f"nodes added/removed ({hostlist.compress(added | removed)}) need restarts "
                                  f"in {family}")
    return result


def node_definition_changed(before: str | None, after: str, node: str, family: str) -> bool:
    """True when the node's own hardware/GRES definition changed (slurmd must restart to see it)."""
    if before is None:
        return False
    old = _parsed(before).nodes.get(node, {})
    new = _parsed(after).nodes.get(node, {})
    return any(old.get(k) != new.get(k) and change_kind(k, family, "node") in RESTARTS_SLURMD
               for k in old.keys() | new.keys())
