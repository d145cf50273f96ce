"""Load one cluster of a multi-cluster repository: its bases, then its own files, merged by key (overlay.py).

    <repo>/bases/<part>/*.yaml             shared parts (any top-level sections, possibly partial)
    <repo>/clusters/<name>/overlay.yaml    `bases: [common, h100]`: merged in this order, then the cluster's files
    <repo>/clusters/<name>/*.yaml          the cluster's own overrides and additions
    <repo>/promotion.yaml                  optional (promotion.py)

Inside one layer files merge as in a single-cluster directory (the loader's rules); across layers overlay.py's.
Every location is relative to the repository root (`clusters/prod/cluster.yaml:4:3`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from reconciler.desired.errors import ConfigError, DesiredStateError, KeyPath, LoadedState, Location
from reconciler.desired.layout import BASES_DIR, CLUSTERS_DIR, OVERLAY_FILE, cluster_names, is_multi_cluster
from reconciler.desired.loader import LoadLimits, load_dir, merge_files, parse_file, validate_merged, yaml_files
from reconciler.desired.overlay import Merged, merge_layers
from reconciler.desired.promotion import PROMOTION_FILE, PromotionRule, read_promotion

__all__ = ["PromotionRule", "cluster_names", "is_multi_cluster", "load_cluster", "load_state", "read_cluster",
           "read_promotion", "unused_bases"]

_PART_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _bases(root: Path, name: str, errors: list[ConfigError], limits: LoadLimits | None) -> tuple[list[str], Path]:
    """The bases a cluster's overlay.yaml names, in order, each checked (errors at the overlay's file:line)."""
    path = root / CLUSTERS_DIR / name / OVERLAY_FILE
    rel = f"{CLUSTERS_DIR}/{name}/{OVERLAY_FILE}"
    if not path.is_file():
        return [], path
    locations: dict[KeyPath, Location] = {}
    doc = parse_file(path, rel, errors, limits, locations)
    if doc is None:
        return [], path
    if not isinstance(doc, dict):
        errors.append(ConfigError(Location(rel, 1, 1), (), "expected a mapping with `bases:` (a list of base "
                                  "names)"))
        return [], path
    for key in doc:
        if key != "bases":
            errors.append(ConfigError(locations.get((key,)), (key,), "unknown key in overlay.yaml (only `bases:`, "
                                      "the list of bases/<part> names, is allowed)"))
    bases = doc.get("bases") or []
    if not isinstance(bases, list):
        errors.append(ConfigError(locations.get(("bases",)), ("bases",), "expected a list of base names"))
        return [], path
    known = sorted(p.name for p in (root / BASES_DIR).iterdir() if p.is_dir()) \
        if (root / BASES_DIR).is_dir() else []
    top = (root / BASES_DIR).resolve()
    out: list[str] = []
    for index, base in enumerate(bases):
        where: KeyPath = ("bases", index)
        at = locations.get(where) or locations.get(("bases",))
        if not isinstance(base, str) or not _PART_NAME.fullmatch(base):
            errors.append(ConfigError(at, where, f"{base!r} is not a base name: a directory name under {BASES_DIR}/ "
                                      "(letters, digits, '_', '.', '-'; no path)"))
        elif base in out:
            errors.append(ConfigError(at, where, f"base {base!r} is listed twice"))
        elif not (root / BASES_DIR / base).is_dir():
            errors.append(ConfigError(at, where, f"no base {base!r}: {BASES_DIR}/{base}/ does not exist (bases: "
                                      f"{', '.join(known) or 'none'})"))
        elif (root / BASES_DIR / base).resolve().parent != top:
            errors.append(ConfigError(at, where, f"base {base!r} links outside {BASES_DIR}/: refused"))
        else:
            out.append(base)
    return out, path


def _layer(root: Path, directory: Path, errors: list[ConfigError], limits: LoadLimits | None,
           files: list[Path]) -> tuple[dict[str, Any], dict[KeyPath, Location]]:
    """One layer's files merged as a single-cluster directory's are (locations relative to ROOT)."""
    found = [p for p in yaml_files(directory) if p != directory / OVERLAY_FILE]
    files.extend(found)
    return merge_files(root, found, errors, limits)


def _stray_files(root: Path) -> list[ConfigError]:
    """Top-level YAML files of a multi-cluster repository other than promotion.yaml: belong in a base or cluster."""
    return [ConfigError(Location(p.name, 1, 1), (), f"{p.name}: a multi-cluster repository (it has {CLUSTERS_DIR}/) "
                        f"reads YAML only from {BASES_DIR}/<part>/ and {CLUSTERS_DIR}/<name>/ (and "
                        f"{PROMOTION_FILE}): move this file into one of them")
            for p in sorted(root.iterdir()) if p.suffix in (".yaml", ".yml") and p.is_file()
            and p.name != PROMOTION_FILE and not p.name.startswith(".")]


OUTSIDE = "leads outside the repository: refused"


def _outside(root: Path, name: str) -> list[ConfigError]:
    """bases/, clusters/ and the cluster's directory must be inside the repository (a link may not lead out)."""
    top = root.resolve()
    out = []
    for rel in (BASES_DIR, CLUSTERS_DIR, f"{CLUSTERS_DIR}/{name}"):
        path = root / rel
        if path.exists() and not path.resolve().is_relative_to(top):
            out.append(ConfigError(None, (), f"{rel}/ {OUTSIDE}"))
    return out


def bad_name(name: str) -> ConfigError | None:
    """The error of a cluster directory whose name --cluster, a daemon's `cluster:` and promotion.yaml cannot
    name (the rule of base names), or None."""
    if _PART_NAME.fullmatch(name):
        return None
    return ConfigError(None, (), f"{CLUSTERS_DIR}/{ascii(name)[1:-1]}/ is not a cluster name (letters, digits, '_', "
                       "'.', '-', not starting with '.' or '-'): --cluster, the daemon's cluster: and promotion.yaml "
                       "cannot name it; rename the directory")


def shared_cluster_names(loaded: dict[str, LoadedState]) -> list[tuple[str, ConfigError]]:
    """(cluster, error) for each cluster whose cluster.name (Slurm's ClusterName) another cluster of the
    repository also has: notifications and Slurm's accounting would take one for the other."""
    first: dict[str, str] = {}
    out = []
    for name in sorted(loaded):
        state = loaded[name]
        other = first.setdefault(state.state.cluster.name, name)
        if other != name:
            where: KeyPath = ("cluster", "name")
            out.append((name, ConfigError(state.where(where), where, f"cluster {other} has this name too "
                        f"({state.state.cluster.name!r}): Slurm's ClusterName and the reconciler's notifications "
                        "tell clusters apart by it; give each its own")))
    return out


def unused_bases(root: Path) -> list[str]:
    """The directories of bases/ that no cluster's overlay.yaml names (nothing reads their files)."""
    top = root / BASES_DIR
    if not top.is_dir():
        return []
    used = {base for name in cluster_names(root) if bad_name(name) is None for base in _bases(root, name, [], None)[0]}
    return sorted(p.name for p in top.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in used)


def read_cluster(root: Path, name: str, errors: list[ConfigError],
                 limits: LoadLimits | None = None) -> tuple[Merged[Location], list[Path]]:
    """Cluster NAME's layers merged, not validated (ERRORS: those of reading them), and the files read."""
    known = cluster_names(root)
    if name not in known:
        raise DesiredStateError([ConfigError(None, (), f"no cluster {name!r} in {root} (clusters: "
                                             f"{', '.join(known) or 'none'})")])
    if (bad := bad_name(name)) is not None:
        raise DesiredStateError([bad])
    errors.extend(_stray_files(root) + _outside(root, name))
    if any(e.message.endswith(OUTSIDE) for e in errors):
        raise DesiredStateError(errors)
    bases, overlay = _bases(root, name, errors, limits)
    files: list[Path] = [overlay] if overlay.is_file() else []
    layers = [_layer(root, root / BASES_DIR / base, errors, limits, files) for base in bases]
    layers.append(_layer(root, root / CLUSTERS_DIR / name, errors, limits, files))
    if len(files) == int(overlay.is_file()):
        errors.append(ConfigError(None, (), f"cluster {name}: no YAML files found in its bases or "
                                  f"{CLUSTERS_DIR}/{name}/"))
    merged = merge_layers(layers)
    errors.extend(ConfigError(loc, path, message) for loc, path, message in merged.problems)
    return merged, files


def load_cluster(root: str | Path, name: str, commit: str | None = None,
                 limits: LoadLimits | None = None) -> LoadedState:
    """Load cluster NAME of the multi-cluster repository at ROOT: its bases then its files, merged and validated."""
    root = Path(root)
    errors: list[ConfigError] = []
    merged, files = read_cluster(root, name, errors, limits)
    state = validate_merged(root, merged.data, merged.locations, errors)
    return LoadedState(state=state, root=root, locations=merged.locations, files=files, commit=commit,
                       cluster=name, trace=merged.trace, removed=merged.removed)


def load_state(root: str | Path, cluster: str | None, commit: str | None = None,
               limits: LoadLimits | None = None) -> LoadedState:
    """Load the desired state at ROOT: a single-cluster directory (CLUSTER None) or one cluster of a repository."""
    root = Path(root)
    if not is_multi_cluster(root):
        if cluster is not None:
            raise DesiredStateError([ConfigError(None, (), f"--cluster {cluster}: {root} is a single-cluster "
                                                 f"desired state (it has no {CLUSTERS_DIR}/ directory)")])
        return load_dir(root, commit, limits)
    return load_cluster(root, need_cluster(root, cluster), commit, limits)


def need_cluster(root: Path, cluster: str | None) -> str:
    """CLUSTER, or DesiredStateError listing the clusters when the repository at ROOT has several and it is None."""
    if cluster is None:
        names = cluster_names(root)
        raise DesiredStateError([ConfigError(None, (), f"this repository holds clusters {', '.join(names) or '(none)'}"
                                             ": name one with --cluster")])
    return cluster
