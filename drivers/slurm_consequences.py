"""What a Slurm configuration change needs: `scontrol reconfigure`, or restarts, by Slurm version family."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache

from reconciler import params as slurm_params
from reconciler.common import hostlist

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
    _node_lines(old, new, family, result)
    return result


def _needs(kind: str) -> str:
    return {"restart_slurmctld": "a slurmctld restart", "restart_slurmd": "slurmd restarts"}.get(kind, "restarts")


def _node_lines(old: SlurmConf, new: SlurmConf, family: str, result: Consequence) -> None:
    """Nodes added or removed, and node keys slurmctld applies only when restarted (before 23.11: CPUs, Gres...)."""
    if set(old.nodes) != set(new.nodes):
        kind = change_kind("NodeName", family, "node")
        result.restart_slurmctld |= kind in RESTARTS_SLURMCTLD
        result.restart_all_slurmd |= kind in RESTARTS_SLURMD
        if kind != "reconfigure":
            added, removed = set(new.nodes) - set(old.nodes), set(old.nodes) - set(new.nodes)
            result.reasons.append(f"nodes added/removed ({hostlist.compress(added | removed)}) need {_needs(kind)} "
                                  f"in {family}")
    # The node's own slurmd restart is node_definition_changed's; here only what slurmctld must restart for.
    keys = {k for n in old.nodes.keys() & new.nodes.keys() for k in old.nodes[n].keys() | new.nodes[n].keys()
            if old.nodes[n].get(k) != new.nodes[n].get(k) and change_kind(k, family, "node") in RESTARTS_SLURMCTLD}
    if keys:
        result.restart_slurmctld = True
        result.reasons.append(f"node {', '.join(sorted(keys))} changed (needs a slurmctld restart in {family})")


def node_definition_changed(before: str | None, after: str, node: str, family: str) -> bool:
    """True when the node's own hardware/GRES definition changed (slurmd must restart to see it)."""
    if before is None:
        return False
    old = _parsed(before).nodes.get(node, {})
    new = _parsed(after).nodes.get(node, {})
    return any(old.get(k) != new.get(k) and change_kind(k, family, "node") in RESTARTS_SLURMD
               for k in old.keys() | new.keys())


def _gres_lines(text: str | None, node: str) -> dict[tuple[str, ...], dict[str, str]]:
    """The gres.conf lines slurmd on NODE uses, keyed by scope, Name, Type and occurrence; their keys (lower case,
    NodeName left out). A NodeName this code cannot expand counts as naming the node."""
    lines: dict[tuple[str, ...], dict[str, str]] = {}
    for raw in (text or "").splitlines():
        pairs = {k.lower(): v for k, v in _pairs(raw.split("#", 1)[0]).items() if k}
        if not pairs:
            continue
        names = pairs.pop("nodename", None)
        if names is not None:
            try:
                if node not in hostlist.expand(names):
                    continue
            except ValueError:
                pass
        head = ("line" if "name" in pairs else "global", pairs.get("name", ""), pairs.get("type", ""))
        number = sum(1 for key in lines if key[:3] == head)
        lines[(*head, str(number))] = pairs
    return lines


def _changed_keys(file: str, before: str | None, after: str, node: str) -> set[tuple[str, str]]:
    """(scope, key) of every key whose value differs for NODE (all keys of a line added or removed)."""
    if file == "gres.conf":
        old, new = _gres_lines(before, node), _gres_lines(after, node)
        return {(line[0], key) for line in old.keys() | new.keys()
                for key in old.get(line, {}).keys() | new.get(line, {}).keys()
                if old.get(line, {}).get(key) != new.get(line, {}).get(key)}
    olds, news = (_parsed(before).globals if before else {}), _parsed(after).globals
    return {("global", k.lower()) for k in olds.keys() | news.keys() if olds.get(k) != news.get(k)}


def conf_file_consequence(file: str, before: str | None, after: str, node: str, family: str) -> Consequence:
    """What a gres.conf or cgroup.conf change needs for NODE in this family, from the keys that changed for it
    (gres.conf: only lines naming the node or no node count). Keys the tables do not know restart slurmd."""
    result = Consequence()
    kinds = {}
    for scope, key in sorted(_changed_keys(file, before, after, node)):
        param = slurm_params.lookup(file, key, scope) or slurm_params.lookup(file, key)
        known = param is not None and family in param.families
        kinds[key] = slurm_params.change_kind(file, key, family, param.scope) if known and param else "restart_slurmd"
    if not kinds:
        return result
    result.reconfigure = True
    ctld = sorted(k for k, kind in kinds.items() if kind in RESTARTS_SLURMCTLD)
    slurmd = sorted(k for k, kind in kinds.items() if kind in RESTARTS_SLURMD)
    result.restart_slurmctld, result.restart_slurmd_here = bool(ctld), bool(slurmd)
    if ctld:
        result.reasons.append(f"{file} {', '.join(ctld)} changed (needs a slurmctld restart in {family})")
    if slurmd:
        result.reasons.append(f"{file} changed on {node}: slurmd must restart")
    return result
