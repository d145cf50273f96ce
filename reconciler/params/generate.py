"""Regenerate reconciler/params/data/*.json from a clone of SchedMD's Slurm repository.

    python -m reconciler.params.generate --slurm-git /work/.mirror/SchedMD+slurm/repo

For each Slurm version family the newest release tag is read: the man pages (slurm.conf.5, gres.conf.5,
cgroup.conf.5) give the documented parameters, their section and any "restart required" note; the C parser tables
(`s_p_options_t`) give every key the daemons accept and its value type. What the pages do not say is kept in the
CURATED lists below and marked "curated" in the data. Output is deterministic (sorted keys, stable JSON).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reconciler.params.sources import (
    SLURM_CONF_SECTIONS,
    COption,
    ManEntry,
    parse_c_tables,
    parse_man,
    restart_note,
)

FAMILIES = ("20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
KINDS = ("reconfigure", "restart_slurmctld", "restart_slurmd", "restart_all")
DATA_DIR = Path(__file__).parent / "data"

# S_P_* parser type -> the type a YAML value is checked against (see coerce() in __init__.py).
C_TYPES = {
    "S_P_STRING": "string", "S_P_PLAIN_STRING": "string", "S_P_POINTER": "string", "S_P_ARRAY": "string",
    "S_P_LINE": "string", "S_P_EXPLINE": "string", "S_P_IGNORE": "string",
    "S_P_LONG": "int", "S_P_UINT16": "int", "S_P_UINT32": "int", "S_P_UINT64": "int",
    "S_P_BOOLEAN": "bool", "S_P_FLOAT": "float", "S_P_DOUBLE": "float", "S_P_LONG_DOUBLE": "float",
}

# slurm.conf keys of the global parser table that start a line of their own scope.
LINE_HEADS = {"NodeName": "node", "PartitionName": "partition", "NodeSet": "nodeset", "DownNodes": "downnodes",
              "FrontendName": "frontend"}
SLURM_CONF_TABLES = {"slurm_conf_options": "global", "_nodename_options": "node", "_partition_options": "partition",
                     "_nodeset_options": "nodeset", "_downnodes_options": "downnodes",
                     "_frontend_options": "frontend"}

# ----------------------------------------------------------------------------------------------------------------
# CURATED: what a change needs where the man pages are silent. These are the decisions that
# drivers/slurm_consequences.py made before these tables existed; tests/params compares them.

# Never applied by `scontrol reconfigure`, in any version (listening ports, auth, where state lives): restart both.
# (SlurmdPort was here until the testbed measured it: see CURATED_OBSERVED_GLOBAL.)
CURATED_ALWAYS_RESTART = (
    "SlurmctldHost", "ControlMachine", "SlurmctldPort", "AuthType", "AuthAltTypes", "CredType",
    "SlurmUser", "SlurmdUser", "StateSaveLocation", "SlurmdSpoolDir", "PluginDir", "ClusterName",
    "SlurmctldParameters", "CommunicationParameters",
)
# Before 23.11 `scontrol reconfigure` left these unapplied until both daemons restarted; 23.11 made reconfigure
# restart the daemons in place, so from 23.11 on reconfigure applies them.
CURATED_RESTART_BEFORE_23_11 = (
    "SelectType", "SelectTypeParameters", "SwitchType", "ProctrackType", "TaskPlugin", "GresTypes",
    "JobAcctGatherType", "JobAcctGatherParams", "AccountingStorageType", "AccountingStorageHost",
    "JobCompType", "MpiDefault", "PrologFlags", "LaunchParameters", "SlurmdParameters",
    "PriorityType", "SchedulerType", "PreemptType", "SlurmctldPidFile", "SlurmdPidFile", "TreeWidth",
    "KeepAliveTime", "MessageTimeout",
)
# Keys of a NodeName= line that slurmd reads at start (hardware and GRES): that node's slurmd restarts (drained
# where jobs run). Before 23.11 slurmctld keeps the old definition until it restarts too; from 23.11 on
# reconfigure applies Gres (CURATED_OBSERVED_NODE).
CURATED_NODE_RESTART_KEYS = ("CPUs", "Boards", "Sockets", "SocketsPerBoard", "CoresPerSocket",
                             "ThreadsPerCore", "RealMemory", "Gres", "CpuSpecList", "MemSpecLimit")
# cgroup.conf follows its man page (no curated rule): cgroup.conf.5 of every release says changes "take effect upon
# restart of Slurm daemons, daemon receipt of the SIGHUP signal, or execution of the command scontrol reconfigure
# unless otherwise noted", and slurmd's reconfigure re-reads it (22.05: cgroup_conf_reinit() in _reconfigure();
# 23.11 on: slurmd re-executes). The testbed cannot observe it (no cgroup plugin: the nodes' /sys/fs/cgroup is
# read-only), so the documents decide.
CURATED_SLURMD_FILES: tuple[str, ...] = ()

# Measured on real daemons of 22.05, 24.11 and 26.05 by tests/params/test_observed_consequences_testbed.py (the
# table in docs/slurm-parameters.md). 22.05 stands for every family before 23.11 and 24.11 for 23.11 and later
# (SchedMD changed reconfigure in 23.11); 26.05 needed what 24.11 needed in every case, so 25.05 and 25.11, between
# them, are inferred from both: the notes say which families are observed and which inferred.
OBSERVED_IN = "tests/params/test_observed_consequences_testbed.py"
OBSERVED_FAMILIES = ("22.05", "24.11", "26.05")
# Global keys: family -> (kind, why). SlurmdPort: slurmctld needs no restart (it only dials the new port once its
# reconfigure has read it), every slurmd restarts to listen there; this overrides the 22.05/23.02 man pages'
# "A restart of slurmctld is required".
CURATED_OBSERVED_GLOBAL = {
    "slurmdport": lambda family: ("restart_slurmd", "slurmctld takes it on reconfigure; every slurmd restarts to "
                                                    "listen on it"),
    "topologyplugin": lambda family: ("restart_slurmctld", "reconfigure does not load a new topology plugin before "
                                                           "23.11; restarting slurmctld is enough")
    if _before(family, "23.11") else ("reconfigure", "reconfigure applies it from 23.11"),
}
# Keys the observation overrides a man page sentence for (the man page's kind is not merged in).
CURATED_OVERRIDES_MAN = ("slurmdport",)


# Node changes before 24.11 follow the documents, not 24.11's observation: slurm.conf.5 of 22.05.11, 23.11.11 and
# 24.05.8 (NODE CONFIGURATION): "Changes in node configuration (e.g. adding nodes, changing their processor count,
# etc.) require restarting both the slurmctld daemon and the slurmd daemons. All slurmd daemons must know each node
# in the system to forward messages"; scontrol.1 22.05 (reconfigure): "The slurmctld daemon and all slurmd daemons
# must also be restarted if nodes are added to or removed from the cluster"; SchedMD's FAQ (add_nodes, rem_nodes)
# of 24.11.7 says a reconfigure is enough only from 24.11 (24.05.8's said 23.11; the line was moved on purpose).
NODES_BY_RECONFIGURE_FROM = "24.11"
FORWARDING_TEST = "tests/params/test_forwarding_testbed.py"
_NODES_DOC = ("slurm.conf.5 {family} (NODE CONFIGURATION): node changes 'require restarting both the slurmctld "
              "daemon and the slurmd daemons. All slurmd daemons must know each node in the system to forward "
              "messages'")


def _node_documented(name: str, family: str) -> tuple[str, str] | None:
    """Node keys where the documents ask for more than the testbed needed: adding or removing a node before 24.11
    restarts slurmctld and every slurmd; in 23.11 and 24.05 a node's hardware or Gres restarts slurmctld and that
    node's slurmd (22.05's observed rule says the same; 24.11's reconfigure is not applied to them)."""
    if not _before(family, NODES_BY_RECONFIGURE_FROM):
        return None
    doc = _NODES_DOC.format(family=family)
    if name == "nodename":
        early = _before(family, "23.11")
        return ("restart_all", doc + ("; scontrol.1 22.05: 'all slurmd daemons must also be restarted if nodes are "
                                      "added to or removed from the cluster'" if early else "")
                + "; SchedMD's FAQ: reconfigure is enough from 24.11 on. A slurmctld restart alone left the other "
                f"slurmds unable to forward to an added node on 22.05 and 24.11 ({FORWARDING_TEST}, TreeWidth=2)")
    if not _before(family, "23.11") and name in {k.lower() for k in CURATED_NODE_RESTART_KEYS}:
        return ("restart_all", doc + "; slurmctld and that node's slurmd restart (24.11's reconfigure is not "
                                     "applied before 24.11)")
    return None


def _node_observed(name: str, family: str) -> tuple[str, str] | None:
    """A node line key's observed kind (NodeName from 24.11: adding/removing nodes; CURATED_NODE_RESTART_KEYS)."""
    early = _before(family, "23.11")
    if name == "nodename":
        return ("reconfigure", "reconfigure adds and removes nodes from 24.11 (SchedMD FAQ 24.11, add_nodes and "
                               f"rem_nodes; a job across forwarded nodes ran after it, {FORWARDING_TEST})")
    if name not in {k.lower() for k in CURATED_NODE_RESTART_KEYS}:
        return None
    if early:
        return ("restart_all", "node hardware/GRES key: slurmctld keeps the old definition until restarted "
                               "(observed for CPUs and Gres), then the node's slurmd restarts to read it")
    if name == "gres":
        return "reconfigure", "reconfigure applies a node's Gres from 24.11 (with gres.conf)"
    return ("restart_slurmd", "node hardware key: reconfigure applies CPUs on 24.11 and 26.05 but kills the node's "
                              "running jobs however it is applied, so its slurmd restarts drained (the safe route)")


def _gres_conf_observed(family: str) -> tuple[str, str]:
    """gres.conf: slurmd reads it at start before 23.11; from 23.11 reconfigure re-reads it."""
    if _before(family, "23.11"):
        return ("restart_slurmd", "gres.conf is read by slurmd at start (not observed alone on 22.05: with a "
                                  "node's Gres it needed slurmctld and slurmd restarted)")
    return "reconfigure", "reconfigure re-reads gres.conf from 23.11 (node GRES, GresTypes, node addition)"


def observed_note(family: str, what: str) -> str:
    """WHAT with where it comes from: observed on this family, or inferred from the family that was."""
    seen = "22.05 observation" if _before(family, "23.11") else "24.11 observation" if _before(family, "24.11") \
        else "24.11 and 26.05 observations"
    how = f"observed on {family} by" if family in OBSERVED_FAMILIES else f"inferred from the {seen} in"
    return f"{what} ({how} {OBSERVED_IN})"


def _before(family: str, limit: str) -> bool:
    return tuple(map(int, family.split("."))) < tuple(map(int, limit.split(".")))


def curated_kind(file: str, scope: str, name: str, family: str) -> tuple[str, str] | None:
    """The curated change kind of a key in one family, with the reason; None where nothing is curated."""
    lname = name.lower()
    if file == "gres.conf":
        kind, why = _gres_conf_observed(family)
        return kind, observed_note(family, why)
    if file in CURATED_SLURMD_FILES:
        return "restart_slurmd", f"{file} is read by slurmd at start"
    if scope == "global":
        if lname in CURATED_OBSERVED_GLOBAL:
            kind, why = CURATED_OBSERVED_GLOBAL[lname](family)
            return kind, observed_note(family, why)
        if lname in {k.lower() for k in CURATED_ALWAYS_RESTART}:
            return "restart_all", "never applied by scontrol reconfigure"
        if lname in {k.lower() for k in CURATED_RESTART_BEFORE_23_11} and _before(family, "23.11"):
            return "restart_all", "scontrol reconfigure does not apply it before 23.11"
    if scope == "node" and (documented := _node_documented(lname, family)):
        return documented
    if scope == "node" and (observed := _node_observed(lname, family)):
        return observed[0], observed_note(family, observed[1])
    return None


def merge_kinds(*kinds: str) -> str:
    """The kind that restarts every daemon any of these restarts."""
    ctld = any(k in ("restart_slurmctld", "restart_all") for k in kinds)
    slurmd = any(k in ("restart_slurmd", "restart_all") for k in kinds)
    return {(False, False): "reconfigure", (True, False): "restart_slurmctld",
            (False, True): "restart_slurmd", (True, True): "restart_all"}[(ctld, slurmd)]


# ----------------------------------------------------------------------------------------------------------------
# Reading the repository


class Repo:
    """Files of a bare Slurm git repository at given tags."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir

    def _git(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(self.git_dir), *args], capture_output=True, text=True,
                              check=False)

    def show(self, tag: str, path: str) -> str | None:
        """A file's text at a tag, None when it does not exist there."""
        result = self._git("show", f"{tag}:{path}")
        return result.stdout if result.returncode == 0 else None

    def first(self, tag: str, paths: Iterable[str]) -> tuple[str, str]:
        """The first of these paths that exists at the tag, and its text."""
        for path in paths:
            text = self.show(tag, path)
            if text is not None:
                return path, text
        raise SystemExit(f"{tag}: none of {list(paths)} exists")

    def tags(self) -> list[str]:
        """All tag names."""
        result = self._git("tag", "--list", "slurm-*")
        if result.returncode != 0:
            raise SystemExit(f"git tag failed in {self.git_dir}: {result.stderr.strip()}")
        return result.stdout.split()


_RELEASE_TAG = re.compile(r"^slurm-(\d+)-(\d+)-(\d+)-(\d+)$")  # release tags; rc tags end in -0rcN


def release_tags(tags: Iterable[str], families: Iterable[str] = FAMILIES) -> dict[str, str | None]:
    """The newest release tag of each family (None for a family without one)."""
    best: dict[str, tuple[tuple[int, int], str]] = {}
    for tag in tags:
        match = _RELEASE_TAG.match(tag)
        if not match:
            continue
        family = f"{int(match.group(1)):02d}.{int(match.group(2)):02d}"
        order = (int(match.group(3)), int(match.group(4)))
        if family not in best or order > best[family][0]:
            best[family] = (order, tag)
    return {family: best[family][1] if family in best else None for family in families}


_FATAL = r'"{key}"\s*,\s*\w+\s*\)\s*\)\s*(?:\{{\s*)?fatal\('


def fatal_keys(source: str, keys: Iterable[str]) -> set[str]:
    """Keys the parser accepts only to stop the daemon with fatal() (removed options that say so)."""
    return {key for key in keys if re.search(_FATAL.format(key=re.escape(key)), source)}


# ----------------------------------------------------------------------------------------------------------------
# Building the tables

Entry = dict[str, Any]


class Table:
    """The parameters of one file, filled family by family."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.params: dict[tuple[str, str], Entry] = {}  # (scope, lower name) -> entry

    def _entry(self, scope: str, name: str) -> Entry:
        key = (scope, name.lower())
        if key not in self.params:
            self.params[key] = {"name": name, "scope": scope, "families": [], "documented": [], "defunct": [],
                                "c_types": {}, "_man": {}}
        return self.params[key]

    def add_option(self, family: str, scope: str, option: COption, defunct: bool) -> None:
        """A key the family's parser accepts."""
        entry = self._entry(scope, option.name)
        entry["name"] = option.name if not entry["documented"] else entry["name"]
        if defunct:
            entry["defunct"].append(family)
        elif family not in entry["families"]:
            entry["families"].append(family)
            entry["c_types"][family] = option.c_type

    def add_man(self, family: str, scope: str, man: ManEntry, parsed: bool) -> None:
        """A key the family's man page documents (parsed: the parser accepts it too)."""
        entry = self._entry(scope, man.name)
        entry["name"] = man.name  # the man page's spelling is canonical
        if family not in entry["documented"]:
            entry["documented"].append(family)
        if not parsed and family not in entry["families"]:
            entry["families"].append(family)  # documented but parsed elsewhere (e.g. a plugin's own options)
            entry["c_types"][family] = "S_P_STRING"
        entry["_man"][family] = man

    def finish(self, covered: list[str]) -> dict[str, dict[str, Entry]]:
        """Change kinds per family, flags, and the JSON shape: scope -> name -> entry."""
        out: dict[str, dict[str, Entry]] = {}
        for (scope, _), entry in sorted(self.params.items()):
            man = entry.pop("_man")
            c_types = entry.pop("c_types")
            families = [f for f in covered if f in entry["families"]]
            entry["families"] = families
            entry["documented"] = [f for f in covered if f in entry["documented"]]
            entry["defunct"] = [f for f in covered if f in entry["defunct"]]
            # Deprecated: the newest release that accepts it does not document it (an alias or a leftover), or some
            # release accepts it only to ignore it or to refuse to start (defunct).
            entry["deprecated"] = bool(entry["defunct"]) or bool(families and families[-1] not in entry["documented"])
            entry["c_type"] = c_types[families[-1]] if families else "S_P_STRING"
            entry["type"] = C_TYPES[entry["c_type"]]
            if len({C_TYPES[t] for t in c_types.values()}) > 1:
                entry["types"] = {f: C_TYPES[t] for f, t in c_types.items()}
            changes: list[tuple[list[str], str, str, str]] = []
            for family in families:
                kind, source, note = self._change(scope, entry["name"], family, man.get(family))
                if changes and changes[-1][1:] == (kind, source, note):
                    changes[-1][0].append(family)
                else:
                    changes.append(([family], kind, source, note))
                value_notes = self._value_notes(man.get(family))
                if value_notes:
                    entry.setdefault("value_notes", {})[family] = value_notes
            entry["change"] = [{"families": f, "kind": k, "source": s, "note": n} for f, k, s, n in changes]
            out.setdefault(scope, {})[entry["name"]] = entry
        return out

    def _change(self, scope: str, name: str, family: str, man: ManEntry | None) -> list[str]:
        """[kind, source, note]: source is man, curated, man+curated or default."""
        curated = curated_kind(self.file, scope, name, family)
        note = restart_note(man.text) if man else None
        if curated and note and scope == "global" and name.lower() in CURATED_OVERRIDES_MAN:
            return [curated[0], "curated", f"{curated[1]}; overrides the man page: {note[1]}"]
        if curated and note:
            kind = merge_kinds(curated[0], note[0])
            return [kind, "man+curated", f"{note[1]} | curated: {curated[1]}"]
        if curated:
            return [curated[0], "curated", curated[1]]
        if note:
            return [note[0], "man", note[1]]
        return ["reconfigure", "default", ""]

    @staticmethod
    def _value_notes(man: ManEntry | None) -> dict[str, list[str]]:
        """Restart notes about one value or sub-option (e.g. SchedulerParameters=no_backup_scheduling): kept for
        reference, not applied to the parameter's change kind."""
        notes = {}
        for value, text in sorted((man.values if man else {}).items()):
            note = restart_note(text)
            if note:
                notes[value] = list(note)
        return notes


def man_entries(page: list[ManEntry], sections: dict[str, str] | None) -> list[tuple[str, ManEntry]]:
    """(scope or '', entry) of a page's parameters; sections maps headings to scopes (None: any heading)."""
    out = []
    for entry in page:
        if sections is None:
            if entry.section.upper() in {"NAME", "EXAMPLE", "EXAMPLES", "COPYING", "SEE ALSO", "FILES"}:
                continue
            out.append(("", entry))
        elif entry.section in sections:
            out.append((sections[entry.section], entry))
    return out


def build_slurm_conf(repo: Repo, tags: dict[str, str]) -> Table:
    """slurm.conf: global keys and the keys of each kind of line."""
    table = Table("slurm.conf")
    for family, tag in tags.items():
        _, source = repo.first(tag, ["src/common/read_config.c"])
        parsed: dict[str, set[str]] = {}
        fatal = fatal_keys(source, [o.name for _, opts in parse_c_tables(source) for o in opts])
        for name, options in parse_c_tables(source):
            scope = SLURM_CONF_TABLES.get(name)
            if scope is None:
                continue
            for option in options:
                option_scope = LINE_HEADS.get(option.name, scope) if scope == "global" else scope
                defunct = option.handler == "_defunct_option" or (scope == "global" and option.name in fatal)
                table.add_option(family, option_scope, option, defunct)
                parsed.setdefault(option_scope, set()).add(option.name.lower())
        _, man = repo.first(tag, ["doc/man/man5/slurm.conf.5"])
        for scope, entry in man_entries(parse_man(man), SLURM_CONF_SECTIONS):
            table.add_man(family, scope, entry, entry.name.lower() in parsed.get(scope, set()))
    return table


GRES_SOURCES = ("src/interfaces/gres.c", "src/common/gres.c")
CGROUP_SOURCES = ("src/interfaces/cgroup.c", "src/common/cgroup.c", "src/common/xcgroup_read_config.c")


def build_gres_conf(repo: Repo, tags: dict[str, str]) -> Table:
    """gres.conf: AutoDetect alone on a line is global; everything else is a key of a Name=/NodeName= line."""
    table = Table("gres.conf")
    for family, tag in tags.items():
        _, source = repo.first(tag, GRES_SOURCES)
        scopes: dict[str, str] = {}
        for _, options in parse_c_tables(source):
            names = {o.name for o in options}
            if "NodeName" in names:  # the file-level table: AutoDetect, Name=..., NodeName=...
                for option in options:
                    scope = "global" if option.c_type != "S_P_ARRAY" else "line"
                    table.add_option(family, scope, option, option.handler == "_defunct_option")
                    scopes.setdefault(option.name.lower(), scope)
            elif "File" in names or "Count" in names:  # the keys of one line
                for option in options:
                    table.add_option(family, "line", option, option.handler == "_defunct_option")
                    scopes["line:" + option.name.lower()] = "line"
        _, man = repo.first(tag, ["doc/man/man5/gres.conf.5"])
        for _, entry in man_entries(parse_man(man), None):
            lname = entry.name.lower()
            if scopes.get(lname) == "global":
                table.add_man(family, "global", entry, True)
            table.add_man(family, "line", entry, "line:" + lname in scopes or scopes.get(lname) == "line")
    return table


def build_cgroup_conf(repo: Repo, tags: dict[str, str]) -> Table:
    """cgroup.conf: global keys only."""
    table = Table("cgroup.conf")
    for family, tag in tags.items():
        _, source = repo.first(tag, CGROUP_SOURCES)
        parsed = set()
        for _, options in parse_c_tables(source):
            if not any(o.name == "ConstrainCores" for o in options):
                continue
            for option in options:
                table.add_option(family, "global", option, option.handler == "_defunct_option")
                parsed.add(option.name.lower())
        _, man = repo.first(tag, ["doc/man/man5/cgroup.conf.5"])
        for _, entry in man_entries(parse_man(man), None):
            table.add_man(family, "global", entry, entry.name.lower() in parsed)
    return table


def document(file: str, tags: dict[str, str | None], table: Table) -> dict[str, Any]:
    """The JSON document of one file."""
    covered = [f for f, t in tags.items() if t]
    return {
        "file": file,
        "generated_by": "python -m reconciler.params.generate --slurm-git <SchedMD slurm.git>",
        "families": {f: t for f, t in tags.items() if t},
        "families_without_tag": [f for f, t in tags.items() if not t],
        "kinds": list(KINDS),
        "change_format": "list of {families, kind, source: man | curated | man+curated | default, note}",
        "parameters": table.finish(covered),
    }


def dumps(doc: dict[str, Any]) -> str:
    """Stable JSON text."""
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


def generate(git_dir: Path) -> dict[str, str]:
    """File name -> JSON text, for all three files."""
    repo = Repo(git_dir)
    tags = release_tags(repo.tags())
    present = {f: t for f, t in tags.items() if t}
    out = {}
    for file, build in (("slurm.conf", build_slurm_conf), ("gres.conf", build_gres_conf),
                        ("cgroup.conf", build_cgroup_conf)):
        out[f"{file}.json"] = dumps(document(file, tags, build(repo, present)))
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: write (or --check) the data files."""
    parser = argparse.ArgumentParser(prog="python -m reconciler.params.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--slurm-git", type=Path, required=True, help="SchedMD slurm git dir (bare or not)")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="where the JSON files go")
    parser.add_argument("--check", action="store_true", help="compare with the files in --out, write nothing")
    args = parser.parse_args(argv)
    files = generate(args.slurm_git)
    stale = []
    for name, text in files.items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
