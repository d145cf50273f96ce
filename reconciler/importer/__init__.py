"""`reconciler import`: an existing cluster's Slurm and storage configuration as a desired-state directory."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from reconciler import params as slurm_params
from reconciler.common import hostlist
from reconciler.facts.parsers import family_of
from reconciler.facts.slurmconf import parse_text, read_tree
from reconciler.importer import accounting, adopt
from reconciler.importer import packages as package_import
from reconciler.importer.convert import ImportProblem, convert_cgroup, convert_gres, convert_slurm
from reconciler.importer.sources import LocalFiles, RemoteFiles
from reconciler.importer.storage import import_exports, import_fstab

__all__ = ["AdoptOptions", "ImportProblem", "ImportResult", "import_files", "family_of"]


@dataclass
class AdoptOptions:
    """What an SSH import adopts beyond the Slurm files, and how it reports progress."""

    munge_key_file: Path | None = None
    image_dirs: list[str] = field(default_factory=list)
    progress: adopt.Progress | None = None
    packages: list[str] = field(default_factory=list)  # --packages patterns (checked by parse_patterns)


@dataclass
class ImportResult:
    """The files written and what the admin should know about them."""

    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    slurm_version: str | None = None
    sources: list[str] = field(default_factory=list)  # adopted files' content, relative to the output directory


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def _inventory(controllers: list[str], compute: list[str], storage_node: str | None,
               managers: dict[str, str]) -> CommentedMap:
    nodes = CommentedSeq()
    names = list(dict.fromkeys(c.split("(", 1)[0] for c in controllers))
    computing = {name for expr in compute for name in hostlist.expand(expr)}
    for name in names:
        # a controller that is also a NodeName (small clusters, a login node that computes) is one entry
        entry = CommentedMap(name=name, host="{name}",
                             roles=["controller"] + (["compute"] if name in computing else []))
        if name == storage_node:
            entry["roles"].append("nfs-server")
        nodes.append(entry)
    for expr in compute:
        rest = [name for name in hostlist.expand(expr) if name not in names]
        if rest:
            nodes.append(CommentedMap(name=expr if len(rest) == len(hostlist.expand(expr))
                                      else hostlist.compress(rest), host="{name}", roles=["compute"]))
    if storage_node and storage_node not in names:
        nodes.append(CommentedMap(name=storage_node, host="{name}", roles=["nfs-server"]))
    for entry in nodes:  # a service manager other than systemd, where every node of the entry reported it
        found = {managers.get(name) for name in hostlist.expand(entry["name"])}
        if len(found) == 1 and (manager := found.pop()) not in (None, "systemd"):
            entry["service_manager"] = CommentedMap(type=manager)
    doc = CommentedMap(nodes=nodes)
    doc.yaml_set_start_comment(
        "Inventory written by `reconciler import`: one entry per SlurmctldHost and per NodeName line.\n"
        "Fill in how the login node reaches each node: `host` is a template ('{name}' is replaced),\n"
        "plus `ssh:` (user, known_hosts, proxy_jump, service_manager) as README explains.")
    return doc


def _adopt(files: RemoteFiles, cluster: CommentedMap, compute: list[str], options: AdoptOptions) -> adopt.Adopted:
    """Read every node's scripts, Slurm files, services, images and munge key fingerprint (one round trip each)."""
    controllers = list(dict.fromkeys(str(c).split("(", 1)[0] for c in cluster["controllers"]))
    computing = [name for expr in compute for name in hostlist.expand(expr)]
    names = list(dict.fromkeys(controllers + computing))
    family = cluster.get("slurm_version")
    want = adopt.wanted(cluster["slurm_conf"], files.config_dir, options.image_dirs,
                        family if family != "FILL-IN" else None)
    req = adopt.request(want)
    if options.packages:
        req.python["packages"] = package_import.snippet(options.packages)
    raw = files.read_nodes(names, req, options.progress)
    answers: dict[str, adopt.NodeAnswer] = {}
    installed: dict[str, package_import.NodePackages] = {}
    unread: list[str] = []
    for name in names:
        value = raw.get(name, "not read")
        if isinstance(value, str):
            unread.append(f"{name}: {value}")
            continue
        answers[name] = adopt.parse_answer(value)
        if options.packages:
            answer = value.get("commands", {}).get("packages", {})
            installed[name] = package_import.parse(answer.get("stdout", "")) if answer.get("rc") == 0 else \
                package_import.NodePackages(manager="unknown", problems=[f"not read: {answer.get('stderr')}"])
    adopted = adopt.adopt(answers, want, controllers, set(computing), options.munge_key_file)
    what = "files, services, images and packages" if options.packages else "files, services and images"
    adopted.warnings += [f"{line}: its {what} are not adopted" for line in unread]
    if options.packages:
        doc = package_import.packages_doc(installed, options.packages, adopted.warnings)
        if doc is not None:
            adopted.docs["packages.yaml"] = doc
    return adopted


def _write(target: Path, data: bytes) -> None:
    """Write a whole file or nothing: temp file beside it, fsync, rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with tmp.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(target)


def _uses_slurmdbd(cluster: CommentedMap) -> bool:
    """True when slurm.conf sends accounting to slurmdbd."""
    params = cluster.get("slurm_conf") or {}
    return str(params.get("AccountingStorageType", "")).endswith("slurmdbd")


def _read_accounting(files: RemoteFiles, name: str, warnings: list[str]) -> CommentedMap | None:
    """The accounting section of the imported node's database (sacctmgr there), or None with a warning."""
    answer = files.transport.run(files.spec, accounting.accounting_command(name))
    facts = accounting.parse_accounting(answer.stdout + answer.stderr) if answer.error is None else None
    if facts is None or facts.error:
        warnings.append(f"accounting: not imported ({answer.error or (facts.error if facts else '')})")
        return None
    return accounting.accounting_doc(facts, warnings)


def import_files(files: LocalFiles | RemoteFiles, out: Path, slurm_version: str | None,
                 source: str, options: AdoptOptions | None = None) -> ImportResult:
    """Convert the files that `files` reads and write cluster.yaml, nodes.yaml (and storage.yaml) into `out`;
    over SSH also adopt every node's scripts and other Slurm files, services, images (files.yaml, ...)."""
    result = ImportResult()
    family = family_of(slurm_version or files.slurm_version)
    result.slurm_version = family
    if family is not None and family not in slurm_params.families():
        raise ImportProblem(source, 0, f"Slurm {family} is not one of the supported releases "
                                       f"({', '.join(slurm_params.families())})")
    config_dir = files.config_dir
    lines = read_tree(files.main("slurm.conf"), files.read)  # ConfSyntaxError names file and line
    converted = convert_slurm(lines, family)
    result.warnings += converted.warnings
    cluster = converted.cluster
    if config_dir != "/etc/slurm":
        cluster["config_dir"] = config_dir
    for name, key, convert in (("gres.conf", "gres", convert_gres), ("cgroup.conf", "cgroup", convert_cgroup)):
        path = files.main(name)
        text = files.read(path)
        if text is None:
            continue
        parsed = read_tree(path, files.read) if "include" in text.lower() else parse_text(text, path)[0]
        cluster[key] = convert(parsed, family, result.warnings)
    if family is None:
        result.warnings.append("the Slurm version is unknown: set cluster.slurm_version (or pass --slurm-version)")
    adopted = _adopt(files, cluster, converted.compute, options or AdoptOptions()) \
        if isinstance(files, RemoteFiles) else adopt.Adopted()
    result.warnings += adopted.warnings
    out.mkdir(parents=True, exist_ok=True)
    yaml = _yaml()
    exports_text, fstab_text = files.storage()
    storage = CommentedMap()
    if exports_text:
        exports = import_exports(exports_text, files.node_name)
        if exports:
            storage["exports"] = exports
    if fstab_text:
        mounts = import_fstab(fstab_text, files.node_name)
        if mounts:
            storage["mounts"] = mounts
    docs = {"cluster.yaml": CommentedMap(cluster=cluster),
            "nodes.yaml": _inventory(list(cluster["controllers"]), converted.compute,
                                     files.node_name if "exports" in storage else None, adopted.managers)}
    docs["cluster.yaml"].yaml_set_start_comment(f"Imported by `reconciler import` from {source}."
                                                + (f"\n{adopted.munge_note}" if adopted.munge_note else ""))
    docs.update(adopted.docs)
    if isinstance(files, RemoteFiles) and _uses_slurmdbd(cluster):
        accounting = _read_accounting(files, str(cluster["name"]), result.warnings)
        if accounting is not None:
            docs["accounting.yaml"] = CommentedMap(accounting=accounting)
            docs["accounting.yaml"].yaml_set_start_comment(
                f"Slurm accounting (sacctmgr) of cluster {cluster['name']}, imported from {source}: QOS, accounts "
                "and users with their limits.\nOnly what is named here is managed (accounting.prune: false).")
    if storage:
        docs["storage.yaml"] = CommentedMap(storage=storage)
        docs["storage.yaml"].yaml_set_start_comment(
            f"NFS exports and NFS/Lustre mounts of {files.node_name}, imported from {source}: widen `nodes` to\n"
            "every node that mounts them.")
    for relative, data in adopted.sources.items():
        _write(out / relative, data)
    for name, doc in docs.items():
        buffer = StringIO()
        yaml.dump(doc, buffer)
        _write(out / name, buffer.getvalue().encode("utf-8"))
        result.files.append(out / name)
    result.sources = sorted(adopted.sources)
    return result
