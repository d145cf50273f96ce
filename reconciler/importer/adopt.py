"""What `reconciler import` adopts beyond slurm.conf, gres.conf and cgroup.conf, read from every node at once.

The scripts slurm.conf names (Prolog, Epilog, ..., globs such as `/etc/slurm/prolog.d/*`), the other files Slurm
reads from its config directory (plugstack.conf and plugstack.conf.d/*, topology.conf, job_submit.lua, ...), the
munge key's fingerprint (never its bytes), the Slurm, munge and NFS services found running, and enroot images in
the directories the admin names. The paths are known from the controller's slurm.conf; every node is then read in
one round trip (the fact script, with `globs`), in parallel. Identical files fold into one `files:` entry with a
node set (as the plan folds changes); nodes whose copy differs get entries of their own.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from reconciler.common import hostlist
from reconciler.desired.managed import MAX_SOURCE_BYTES
from reconciler.drivers.slurmctld_steps import reexecs
from reconciler.facts import parsers
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import FileFact, ServiceFact, StatFact
from reconciler.facts.services import status_python
from reconciler.model import ServiceManager

# slurm.conf parameters naming a program Slurm runs (the value's first word; a glob names several).
SCRIPT_PARAMS = ("Prolog", "Epilog", "PrologSlurmctld", "EpilogSlurmctld", "TaskProlog", "TaskEpilog",
                 "SrunProlog", "SrunEpilog", "HealthCheckProgram", "RebootProgram", "ResumeProgram",
                 "SuspendProgram", "ResumeFailProgram", "UnkillableStepProgram")
RESTART_SLURMD = "restart slurmd rolling"
RECONFIGURE = "scontrol reconfigure"
# Files of the config directory Slurm reads, and what a change of one needs (plugstack.conf: spank_notify). The
# job_container plugin is loaded when slurmd starts; topology, accounting-gather, OCI, helpers and MPI settings are
# read again on `scontrol reconfigure`; slurmctld reloads job_submit.lua itself when it changes.
CONFIG_FILES: dict[str, str | None] = {
    "plugstack.conf": RESTART_SLURMD, "topology.conf": RECONFIGURE, "job_submit.lua": None,
    "acct_gather.conf": RECONFIGURE, "oci.conf": RECONFIGURE, "helpers.conf": RECONFIGURE,
    "job_container.conf": RESTART_SLURMD, "mpi.conf": RECONFIGURE,
}
CONFIG_GLOBS: dict[str, str | None] = {"plugstack.conf.d/*": RESTART_SLURMD}  # as plugstack.conf
SPANK_FILES = ("plugstack.conf", "plugstack.conf.d/*")


def spank_notify(family: str | None, configless: bool) -> str:
    """What a plugstack.conf (or plugstack.conf.d/*) change needs in this family and mode.

    Job steps load the SPANK plugins afresh (observed on 22.05 and 24.11 by
    tests/params/test_observed_consequences_testbed.py), but spank.8 (22.05 and 24.11): "Plugins loaded in slurmd
    context persist for the entire time slurmd is running, so if configuration is changed or plugins are updated,
    slurmd must be restarted". From 23.11 `scontrol reconfigure` re-executes slurmd (scontrol.1 23.11: "creating new
    processes for the daemons"), which loads them afresh; in configless mode slurmd's copy of the file is refreshed
    only by a reconfigure or a restart (configless_slurm.shtml: "The slurmd on startup will reach out to a
    slurmctld"; "scontrol reconfig and checking that the config was updated"). Unknown family: the restart.
    """
    return RECONFIGURE if configless or reexecs(family) else RESTART_SLURMD
SERVICES = ("slurmctld", "slurmd", "slurmdbd", "munge", "nfs-server", "nfs-kernel-server")
MUNGE_KEY = "/etc/munge/munge.key"
# Programs a package owns (RebootProgram=/sbin/reboot): left to the package manager, never adopted.
PACKAGED = ("/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/lib/", "/usr/lib/", "/usr/libexec/")
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class Origin:
    """Why a path is adopted (a comment in the YAML) and what a change of it needs."""

    why: str
    notify: str | None = None
    script: bool = False


@dataclass
class Wanted:
    """The paths and patterns to read on every node."""

    paths: dict[str, Origin] = field(default_factory=dict)
    globs: dict[str, Origin] = field(default_factory=dict)
    image_dirs: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def wanted(slurm_conf: Mapping[str, Any], config_dir: str, image_dirs: list[str], family: str | None = None) -> Wanted:
    """What to read, from the imported slurm.conf parameters (Slurm's spelling), the config directory and the Slurm
    family (what a plugstack.conf change needs depends on it)."""
    out = Wanted(image_dirs=[d.rstrip("/") or "/" for d in image_dirs])
    configless = "enable_configless" in str(slurm_conf.get("SlurmctldParameters") or "")
    spank = spank_notify(family, configless)
    spank_why = ("; configless before 23.11: slurmd-context plugins take a change only when slurmd restarts "
                 "(spank.8), the reconfigure refreshes the copy job steps read") if configless and not reexecs(
                     family) else ""
    for param in SCRIPT_PARAMS:
        value = slurm_conf.get(param)
        if not isinstance(value, str) or not value.strip():
            continue
        program = value.split()[0]
        if not program.startswith("/"):
            out.skipped.append(f"{param}={value}: not an absolute path, not adopted")
            continue
        if program.startswith(PACKAGED):
            out.skipped.append(f"{param}={value}: {program} belongs to a package, not adopted")
            continue
        origin = Origin(why=f"{param} in slurm.conf", script=True)
        (out.globs if _GLOB_CHARS & set(program) else out.paths).setdefault(program, origin)
    plugstack = slurm_conf.get("PlugStackConfig")
    for name, notify in CONFIG_FILES.items():
        path = posixpath.join(config_dir, name)
        if name == "plugstack.conf" and isinstance(plugstack, str) and plugstack.startswith("/"):
            path = plugstack
        spanks = name in SPANK_FILES
        out.paths.setdefault(path, Origin(why=f"{name}, read by Slurm" + (spank_why if spanks else ""),
                                          notify=spank if spanks else notify, script=name.endswith(".lua")))
    for pattern, notify in CONFIG_GLOBS.items():
        spanks = pattern in SPANK_FILES
        out.globs.setdefault(posixpath.join(config_dir, pattern), Origin(
            why="a SPANK plugin configuration" + (spank_why if spanks else ""), notify=spank if spanks else notify))
    return out


def request(want: Wanted) -> FactRequest:
    """One fact-script request reading all of it on a node (the munge key by sha256 only)."""
    req = FactRequest(files=list(want.paths), hashes=[MUNGE_KEY], max_bytes=MAX_SOURCE_BYTES)
    req.globs = {pattern: "files" for pattern in want.globs}
    req.globs.update({posixpath.join(d, "*.sqsh"): "stats" for d in want.image_dirs})
    req.commands["systemd"] = ("[ -d /run/systemd/system ] && systemctl is-active " + " ".join(SERVICES)
                               + " 2>/dev/null; true")
    req.commands["luac"] = "command -v luac || true"
    req.python["supervisord"] = status_python(ServiceManager(type="supervisord"), list(SERVICES)) or ""
    return req


@dataclass
class NodeAnswer:
    """What one node holds of the wanted files, its services and images."""

    files: dict[str, FileFact] = field(default_factory=dict)
    globs: dict[str, list[str]] = field(default_factory=dict)
    stats: dict[str, StatFact] = field(default_factory=dict)
    services: dict[str, ServiceFact] = field(default_factory=dict)
    manager: str | None = None  # "systemd" or "supervisord", when one answered
    luac: bool = False


def parse_answer(raw: dict[str, Any]) -> NodeAnswer:
    """The fact script's JSON answer to `request` as a NodeAnswer."""
    commands = raw.get("commands", {})
    answer = NodeAnswer(files={p: FileFact(**v) for p, v in raw.get("files", {}).items()},
                        globs={p: list(v) for p, v in raw.get("globs", {}).items()},
                        stats={p: StatFact(**v) for p, v in raw.get("stats", {}).items()},
                        luac=bool(commands.get("luac", {}).get("stdout", "").strip()))
    systemd = commands.get("systemd", {}).get("stdout", "")
    supervisord = commands.get("supervisord", {}).get("stdout", "")
    if systemd.strip():
        answer.manager = "systemd"
        answer.services = parsers.parse_systemctl_is_active(list(SERVICES), systemd)
    elif supervisord.strip():
        answer.manager = "supervisord"
        answer.services = parsers.parse_supervisorctl_status(supervisord)
    return answer


@dataclass
class Adopted:
    """The YAML documents, the source files and the warnings of an adoption."""

    docs: dict[str, CommentedMap] = field(default_factory=dict)
    sources: dict[str, bytes] = field(default_factory=dict)  # path relative to the output directory -> bytes
    warnings: list[str] = field(default_factory=list)
    munge_note: str | None = None
    managers: dict[str, str] = field(default_factory=dict)  # node -> service manager type


def _validate_for(text: str, path: str, origin: Origin, luac: bool) -> str | None:
    """The syntax check a script gets before it is installed: by its shebang, luac for Lua where present."""
    first = text.split("\n", 1)[0]
    if path.endswith(".lua") or (first.startswith("#!") and "lua" in first):
        return "luac -p %s" if luac else None
    if not origin.script or not first.startswith("#!"):
        return None
    interpreter = first[2:].split()
    name = posixpath.basename(interpreter[0]) if interpreter else ""
    if name == "env" and len(interpreter) > 1:
        name = interpreter[1]
    if name == "bash":
        return "bash -n %s"
    if name in ("sh", "dash"):
        return "sh -n %s"
    return None


def _text_of(fact: FileFact) -> str | None:
    """The file's exact text, or None when it is not UTF-8 text read whole (binary, too large)."""
    if fact.content is None or "\x00" in fact.content:
        return None
    if hashlib.sha256(fact.content.encode("utf-8")).hexdigest() != fact.sha256:
        return None  # decoded with replacement characters: not the bytes on the node
    return fact.content


def _files(answers: Mapping[str, NodeAnswer], want: Wanted, compute: set[str], out: Adopted) -> None:
    """`files:` entries: one per path and distinct (content, mode, owner, group), with its node set."""
    paths: dict[str, Origin] = dict(want.paths)
    for answer in answers.values():
        for pattern, found in answer.globs.items():
            if pattern in want.globs:
                for path in found:
                    paths.setdefault(path, want.globs[pattern])
    entries = CommentedSeq()
    for path in sorted(paths):
        origin = paths[path]
        groups: dict[tuple[Any, ...], list[str]] = {}
        texts: dict[str | None, str] = {}
        for node, answer in answers.items():
            fact = answer.files.get(path)
            if fact is None or not fact.exists:
                continue
            text = _text_of(fact)
            if text is None:
                out.warnings.append(f"{node}:{path}: not adopted (not UTF-8 text, or larger than "
                                    f"{MAX_SOURCE_BYTES} bytes)")
                continue
            slurmd = origin.notify == RESTART_SLURMD and node in compute
            texts[fact.sha256] = text
            groups.setdefault((fact.sha256, fact.mode, fact.owner, fact.group, slurmd), []).append(node)
        ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
        for number, ((sha, mode, owner, group, slurmd), nodes) in enumerate(ordered):
            text = texts[sha]
            source = "files" + path + ("" if number == 0 else f"@{nodes[0]}")
            out.sources[source] = text.encode("utf-8")
            entry = CommentedMap(path=path, nodes=hostlist.compress(nodes), source=source, mode=mode,
                                 owner=owner, group=group)
            validate = _validate_for(text, path, origin, all(answers[n].luac for n in nodes))
            if validate:
                entry["validate"] = validate
            notify = origin.notify if origin.notify != RESTART_SLURMD or slurmd else None
            if notify:
                entry["notify"] = [notify]
            entries.append(entry)
            note = origin.why + ("" if len(ordered) == 1 else f"; copy {number + 1} of {len(ordered)} that differ")
            entries.yaml_set_comment_before_after_key(len(entries) - 1, before=note, indent=2)
    if entries:
        doc = CommentedMap(files=entries)
        doc.yaml_set_start_comment("Files Slurm reads and scripts it runs, adopted by `reconciler import`: content "
                                   "under files/, kept exactly\n(mode, owner, group too) on the nodes that had "
                                   "them; nodes whose copy differed have entries of their own.")
        out.docs["files.yaml"] = doc


def _services(answers: Mapping[str, NodeAnswer], out: Adopted) -> None:
    """`services:` entries: the Slurm, munge and NFS services found running, one per service with its nodes."""
    running: dict[str, list[str]] = {}
    for node, answer in answers.items():
        if answer.manager:
            out.managers[node] = answer.manager
        for name in SERVICES:
            fact = answer.services.get(name)
            if fact is not None and fact.running:
                running.setdefault(name, []).append(node)
    if running:
        entries = CommentedSeq(CommentedMap(name=name, nodes=hostlist.compress(nodes), state="running")
                               for name, nodes in running.items())
        doc = CommentedMap(services=entries)
        doc.yaml_set_start_comment("Services found running by `reconciler import` (kept running; `enabled` is left "
                                   "alone until you set it).")
        out.docs["services.yaml"] = doc


def _images(answers: Mapping[str, NodeAnswer], want: Wanted, controllers: list[str], out: Adopted) -> None:
    """`images:` entries for the .sqsh files of the image directories (uri unknown: to fill in)."""
    seen: dict[str, str] = {}
    order = [n for n in controllers if n in answers] + [n for n in answers if n not in controllers]
    for node in order:
        for path, stat in sorted(answers[node].stats.items()):
            if stat.exists and (stat.size or 0) > 0 and any(path.startswith(d + "/") for d in want.image_dirs):
                seen.setdefault(path, node)
    if seen:
        entries = CommentedSeq(CommentedMap(path=path, import_on=node) for path, node in sorted(seen.items()))
        doc = CommentedMap(images=entries)
        doc.yaml_set_start_comment("Enroot images found by `reconciler import`. Their uri is not recorded in the "
                                   "file: add `uri:` to each so that\na lost image can be imported again "
                                   "(without it, a missing image is reported as an error).")
        out.docs["images.yaml"] = doc


def _munge(answers: Mapping[str, NodeAnswer], key_file: Path | None, out: Adopted) -> None:
    """`munge:` when the admin's key file has the nodes' key; otherwise a note with the fingerprints."""
    keys: dict[str, list[str]] = {}
    for node, answer in answers.items():
        fact = answer.files.get(MUNGE_KEY)
        if fact is not None and fact.exists and fact.sha256:
            keys.setdefault(fact.sha256, []).append(node)
    if not keys:
        return
    seen = "; ".join(f"sha256:{sha} on {hostlist.compress(nodes)}" for sha, nodes in keys.items())
    if len(keys) > 1:
        out.warnings.append(f"{MUNGE_KEY} differs between nodes ({seen}): munge authentication fails between them")
    if key_file is not None:
        local = hashlib.sha256(key_file.read_bytes()).hexdigest()
        if list(keys) == [local]:
            out.docs["munge.yaml"] = CommentedMap(munge=CommentedMap(key_file=str(key_file)))
            out.docs["munge.yaml"].yaml_set_start_comment(f"The munge key: {key_file} holds the nodes' key "
                                                          f"(sha256:{local}).")
            return
        out.warnings.append(f"{key_file} (sha256:{local}) is not the nodes' munge key ({seen}): munge: not written")
    out.munge_note = (f"The munge key is not managed yet. Nodes have {seen}. Put that key in a file on the\n"
                      "login node (never in Git) and add `munge: {key_file: /etc/reconciler/munge.key}`.")


def adopt(answers: Mapping[str, NodeAnswer], want: Wanted, controllers: list[str], compute: set[str],
          munge_key_file: Path | None = None) -> Adopted:
    """The YAML documents and source files adopting what the nodes hold."""
    out = Adopted(warnings=list(want.skipped))
    _files(answers, want, compute, out)
    _services(answers, out)
    _images(answers, want, controllers, out)
    _munge(answers, munge_key_file, out)
    return out


Progress = Callable[[int, int], None]
