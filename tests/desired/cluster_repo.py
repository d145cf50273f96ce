"""A two-cluster repository built from the bundled desired state, for the multi-cluster tests (issue 37)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.desired_fixtures import EXAMPLE

DEBUG_OVERRIDE = 'cluster:\n  name: b\n  partitions:\n    - name: debug\n      MaxTime: "02:00:00"\n'


def two_cluster_repo(root: Path) -> Path:
    """ROOT/bases/common (the bundled desired state), clusters/a (no override but its name) and clusters/b
    (its name and the debug partition's MaxTime: clusters/b/cluster.yaml line 5)."""
    common = root / "bases" / "common"
    shutil.copytree(EXAMPLE, common, ignore=shutil.ignore_patterns("examples", "README.md"))
    for name, text in (("a", "cluster:\n  name: a\n"), ("b", DEBUG_OVERRIDE)):
        (root / "clusters" / name).mkdir(parents=True)
        (root / "clusters" / name / "overlay.yaml").write_text("bases: [common]\n")
        (root / "clusters" / name / "cluster.yaml").write_text(text)
    return root
