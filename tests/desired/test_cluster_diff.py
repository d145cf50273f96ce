"""touched_clusters: which clusters of a multi-cluster repository a change reaches, by their merged state."""

from __future__ import annotations

import shutil
from pathlib import Path

from reconciler.desired.cluster_diff import touched_clusters
from tests.engine.testbed_state import write_state

FILES = 'files:\n  - path: /etc/motd\n    source: motd.txt\n    nodes: "gpu[01-02]"\n'


def fleet(root: Path) -> Path:
    """A two-cluster repository (prod, staging) sharing one base that names a `source:` file."""
    base = root / "bases" / "common"
    write_state(base, name="fleet", state_dir=root / "state", subnet="10.250.9", computes="gpu[01-02]")
    (base / "files.yaml").write_text(FILES)
    (base / "motd.txt").write_text("hello\n")
    for name in ("prod", "staging"):
        (root / "clusters" / name).mkdir(parents=True)
        (root / "clusters" / name / "overlay.yaml").write_text("bases: [common]\n")
        (root / "clusters" / name / "cluster.yaml").write_text(f"cluster:\n  name: {name}\n")
    return root


def changed(tmp_path: Path) -> tuple[Path, Path]:
    """The old tree and a copy of it to change."""
    old = fleet(tmp_path / "old")
    new = tmp_path / "new"
    shutil.copytree(old, new)
    return old, new


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_nothing_changed_touches_nothing(tmp_path: Path) -> None:
    old, new = changed(tmp_path)
    assert touched_clusters(old, new) == {"prod": False, "staging": False}


def test_base_change_touches_every_cluster(tmp_path: Path) -> None:
    old, new = changed(tmp_path)
    edit(new / "bases/common/cluster.yaml", 'MaxTime: "04:00:00"', 'MaxTime: "05:00:00"')
    assert touched_clusters(old, new) == {"prod": True, "staging": True}


def test_override_touches_only_its_cluster(tmp_path: Path) -> None:
    old, new = changed(tmp_path)
    edit(new / "clusters/prod/cluster.yaml", "  name: prod\n",
         '  name: prod\n  partitions:\n    - name: batch\n      MaxTime: "08:00:00"\n')
    assert touched_clusters(old, new) == {"prod": True, "staging": False}


def test_base_change_overridden_everywhere_touches_nothing(tmp_path: Path) -> None:
    old, new = changed(tmp_path)
    for tree in (old, new):
        for name in ("prod", "staging"):
            edit(tree / f"clusters/{name}/cluster.yaml", f"  name: {name}\n",
                 f'  name: {name}\n  partitions:\n    - name: batch\n      MaxTime: "08:00:00"\n')
    edit(new / "bases/common/cluster.yaml", 'MaxTime: "04:00:00"', 'MaxTime: "05:00:00"')
    assert touched_clusters(old, new) == {"prod": False, "staging": False}


def test_source_file_bytes_count(tmp_path: Path) -> None:
    old, new = changed(tmp_path)
    (new / "bases/common/motd.txt").write_text("hello again\n")
    assert touched_clusters(old, new) == {"prod": True, "staging": True}


def test_moving_a_key_to_another_file_touches_nothing(tmp_path: Path) -> None:
    old, new = changed(tmp_path)
    (new / "bases/common/files.yaml").unlink()
    (new / "clusters/prod/files.yaml").write_text(FILES.replace("source: motd.txt", "source: ../../bases/common/"
                                                                                     "motd.txt"))
    (new / "clusters/staging/files.yaml").write_text(FILES.replace("source: motd.txt", "source: ../../bases/"
                                                                                        "common/motd.txt"))
    assert touched_clusters(old, new) == {"prod": False, "staging": False}


def test_new_broken_and_removed_clusters(tmp_path: Path) -> None:
    old, new = changed(tmp_path)
    shutil.copytree(new / "clusters/staging", new / "clusters/b200")
    edit(new / "clusters/b200/cluster.yaml", "  name: staging", "  name: b200")
    edit(new / "clusters/prod/cluster.yaml", "  name: prod\n", "  name: prod\n  slurm_version: [22.05\n")
    shutil.rmtree(new / "clusters/staging")
    assert touched_clusters(old, new) == {"b200": True, "prod": True}  # staging removed: not in the new tree
    # a cluster broken the same way on both sides is not touched by the change
    assert touched_clusters(new, new) == {"b200": False, "prod": False}
