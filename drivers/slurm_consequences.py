"""What a Slurm configuration change needs: `scontrol reconfigure`, or restarts, by Slurm version family."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from reconciler import params as slurm_params
from reconciler.common import hostlist
from reconciler.facts import slurmconf

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
    """slurm.conf split into global keys, node definitions and partitions, as the one reader
    (reconciler.facts.slurmconf) means it: keys in lower case, NodeName/PartitionName=DEFAULT merged, hostlists
    expanded, the controllers as one `slurmctldhost` key. `error` says why Slurm could not read the text."""

    globals: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)  # node name -> its NodeName= params
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)
    spelled: dict[str, str] = field(default_factory=dict)  # lower-case key -> as written, for reasons
    error: str | None = None

    def name(self, key: str) -> str:
        """KEY as the text writes it (`SlurmdPort` for `slurmdport`)."""
        return self.spelled.get(key, "SlurmctldHost" if key == "slurmctldhost" else key)


def parse_slurm_conf(text: str, file: str = "slurm.conf") -> SlurmConf:
    """Read slurm.conf text with reconciler.facts.slurmconf (comments, continuations, quotes and key case as
    Slurm reads them); text Slurm would refuse gives an empty SlurmConf with `error` set."""
    try:
        read = slurmconf.meaning(slurmconf.parse_text(text, file)[0])
    except ValueError as exc:  # ConfSyntaxError, or a hostlist Slurm would refuse
        return SlurmConf(error=str(exc))
    found = dict(read.globals)
    if read.controllers:
        found["slurmctldhost"] = ",".join(read.controllers)
    return SlurmConf(found, read.nodes, read.partitions, read.spelled)


@lru_cache(maxsize=16)
def _parsed(text: str, file: str = "slurm.conf") -> SlurmConf:
    """parse_slurm_conf, cached: a plan asks about the same two files once per node. Read-only results."""
    return parse_slurm_conf(text, file)


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
    if old.error or new.error:  # Slurm cannot read one of them: nothing here can say a reconfigure is enough
        result.reconfigure = result.restart_slurmctld = result.restart_all_slurmd = True
        which = "on the node" if old.error else "desired"
        result.reasons.append(f"slurm.conf {which} is not readable as Slurm reads it ({old.error or new.error}): "
                              "restarting slurmctld and every slurmd")
        return result
    changed = {k for k in old.globals.keys() | new.globals.keys() if old.globals.get(k) != new.globals.get(k)}
    if not changed and old.nodes == new.nodes and old.partitions == new.partitions:
        return result
    result.reconfigure = True
    names = {key: new.name(key) if key in new.spelled else old.name(key) for key in changed}
    kinds = {names[key]: change_kind(key, family) for key in sorted(changed, key=names.__getitem__)}
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
    keys = {new.name(k) if k in new.spelled else old.name(k)
            for n in old.nodes.keys() & new.nodes.keys() for k in old.nodes[n].keys() | new.nodes[n].keys()
            if old.nodes[n].get(k) != new.nodes[n].get(k) and change_kind(k, family, "node") in RESTARTS_SLURMCTLD}
    if keys:
        result.restart_slurmctld = True
        result.reasons.append(f"node {', '.join(sorted(keys))} changed (needs a slurmctld restart in {family})")


def node_definition_changed(before: str | None, after: str, node: str, family: str) -> bool:
    """True when the node's own hardware/GRES definition changed (slurmd must restart to see it)."""
    if before is None:
        return False
    was, now = _parsed(before), _parsed(after)
    if was.error or now.error:  # slurm_conf_consequence restarts every slurmd then
        return True
    old, new = was.nodes.get(node, {}), now.nodes.get(node, {})
    return any(old.get(k) != new.get(k) and change_kind(k, family, "node") in RESTARTS_SLURMD
               for k in old.keys() | new.keys())


def _gres_lines(text: str | None, node: str) -> dict[tuple[str, ...], dict[str, str]]:
    """The gres.conf lines slurmd on NODE uses, keyed by scope, Name, Type and occurrence; their keys (lower case,
    NodeName left out). A NodeName this code cannot expand counts as naming the node. Read with
    reconciler.facts.slurmconf; raises its ConfSyntaxError for text Slurm would refuse."""
    lines: dict[tuple[str, ...], dict[str, str]] = {}
    for line in slurmconf.parse_text(text or "", "gres.conf")[0]:
        pairs = {k.lower(): v for k, v in line.pairs}
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
    was, now = (_parsed(before, file) if before else SlurmConf()), _parsed(after, file)
    if was.error or now.error:
        raise ValueError(was.error or now.error)
    olds, news = was.globals, now.globals
    return {("global", k) for k in olds.keys() | news.keys() if olds.get(k) != news.get(k)}


def conf_file_consequence(file: str, before: str | None, after: str, node: str, family: str) -> Consequence:
    """What a gres.conf or cgroup.conf change needs for NODE in this family, from the keys that changed for it
    (gres.conf: only lines naming the node or no node count). Keys the tables do not know restart slurmd."""
    result = Consequence()
    try:
        changed = _changed_keys(file, before, after, node)
    except ValueError as exc:  # ConfSyntaxError or a bad hostlist, in either text: which keys changed is unknown
        result.reconfigure = result.restart_slurmd_here = True
        result.reasons.append(f"{file} for {node} is not readable as Slurm reads it ({exc}): slurmd must restart")
        return result
    kinds = {}
    for scope, key in sorted(changed):
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
