"""The layout of a multi-cluster repository: `bases/<part>/`, `clusters/<name>/` (with `overlay.yaml`).

A repository without a `clusters/` directory is a single-cluster repository (today's layout, `load_dir`).
"""

from __future__ import annotations

from pathlib import Path

BASES_DIR = "bases"
CLUSTERS_DIR = "clusters"
OVERLAY_FILE = "overlay.yaml"


def is_multi_cluster(root: str | Path) -> bool:
    """True when the repository at ROOT holds several clusters (it has a `clusters/` directory)."""
    return (Path(root) / CLUSTERS_DIR).is_dir()


def cluster_names(root: str | Path) -> list[str]:
    """The sorted names of the `clusters/*/` directories of ROOT; [] for a single-cluster repository."""
    top = Path(root) / CLUSTERS_DIR
    if not top.is_dir():
        return []
    return sorted(p.name for p in top.iterdir() if p.is_dir() and not p.name.startswith("."))
