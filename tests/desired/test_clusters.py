"""Several clusters from one repository (issue 37): the layer merge, traces, hostile overlays, the bundled state.

Real files in temporary directories; the commands are in test_clusters_cli.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.desired.clusters import cluster_names, load_cluster, load_state
from reconciler.desired.errors import ConfigError, DesiredStateError
from reconciler.desired.loader import load_dir
from reconciler.desired.overlay import merge_layers
from tests.desired.cluster_repo import two_cluster_repo
from tests.desired_fixtures import EXAMPLE

MAX_TIME = ("cluster", "partitions", 1, "MaxTime")


def _errors(root: Path, cluster: str | None) -> list[ConfigError]:
    with pytest.raises(DesiredStateError) as info:
        load_state(root, cluster)
    return info.value.errors


def _locs(layer: int, data: dict[str, object]) -> dict[tuple[str | int, ...], str]:
    """A location per key path: `L<layer>:<path>` (what a file:line stands for in these unit tests)."""
    out: dict[tuple[str | int, ...], str] = {}

    def walk(value: object, prefix: tuple[str | int, ...]) -> None:
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
        for key, child in items:
            out[(*prefix, key)] = f"L{layer}:{'.'.join(map(str, (*prefix, key)))}"
            walk(child, (*prefix, key))
    walk(data, ())
    return out


def merge_files(*layers: dict[str, object]):  # type: ignore[no-untyped-def]
    return merge_layers([(data, _locs(i, data)) for i, data in enumerate(layers)])


# ---- the merge rules -------------------------------------------------------------------------------------------

def test_mappings_merge_key_by_key_recursively() -> None:
    merged = merge_files({"cluster": {"name": "a", "slurm_conf": {"X": 1, "Y": 2}}},
                    {"cluster": {"slurm_conf": {"Y": 3, "Z": 4}}})
    assert merged.data == {"cluster": {"name": "a", "slurm_conf": {"X": 1, "Y": 3, "Z": 4}}}
    assert merged.locations[("cluster", "name")] == "L0:cluster.name"
    assert merged.trace[("cluster", "slurm_conf", "Y")] == ["L0:cluster.slurm_conf.Y", "L1:cluster.slurm_conf.Y"]
    assert merged.trace[("cluster", "slurm_conf", "Z")] == ["L1:cluster.slurm_conf.Z"]


def test_lists_of_named_mappings_merge_by_name_and_new_names_are_appended_in_order() -> None:
    base = {"parts": [{"name": "gpu", "MaxTime": "1:00:00", "State": "UP"}, {"name": "debug", "State": "UP"}]}
    over = {"parts": [{"name": "new2"}, {"name": "gpu", "MaxTime": "2:00:00"}, {"name": "new1"}]}
    merged = merge_files(base, over)
    assert merged.data["parts"] == [{"name": "gpu", "MaxTime": "2:00:00", "State": "UP"},
                                    {"name": "debug", "State": "UP"}, {"name": "new2"}, {"name": "new1"}]
    assert merged.trace[("parts", 0, "MaxTime")] == ["L0:parts.0.MaxTime", "L1:parts.1.MaxTime"]
    assert merged.locations[("parts", 0, "State")] == "L0:parts.0.State"
    assert merged.locations[("parts", 2, "name")] == "L1:parts.0.name"  # the overlay's item 0, now item 2
    assert merged.locations[("parts", 3)] == "L1:parts.2"


def test_other_lists_are_replaced_whole_and_their_old_items_leave_no_trace() -> None:
    merged = merge_files({"a": [1, 2, 3], "b": [{"name": "x"}], "c": [{"x": 1}, {"x": 2}]},
                    {"a": [9], "b": [], "c": [{"x": 5}]})
    assert merged.data == {"a": [9], "b": [], "c": [{"x": 5}]}
    assert ("a", 1) not in merged.locations and ("a", 1) not in merged.trace
    assert ("c", 1, "x") not in merged.locations
    assert merged.trace[("a", 0)] == ["L1:a.0"]  # a replaced list's items are the new ones only
    assert merged.trace[("a",)] == ["L0:a", "L1:a"]
    mixed = merge_files({"l": [{"name": "x", "v": 1}]}, {"l": [{"name": "x", "v": 2}, "plain"]})
    assert mixed.data["l"] == [{"name": "x", "v": 2}, "plain"]  # not every item named: replaced


def test_scalars_and_mismatched_types_are_replaced() -> None:
    merged = merge_files({"k": {"deep": {"x": 1}}, "s": 1}, {"k": "flat", "s": None}, {"s": "three"})
    assert merged.data == {"k": "flat", "s": "three"}
    assert ("k", "deep") not in merged.locations and ("k", "deep", "x") not in merged.trace
    assert merged.trace[("s",)] == ["L0:s", "L1:s", "L2:s"]
    assert merged.locations[("s",)] == "L2:s"


# ---- loading clusters from files --------------------------------------------------------------------------------

def test_an_override_changes_only_its_cluster_and_the_trace_names_every_layer(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    assert cluster_names(root) == ["a", "b"]
    a, b = load_state(root, "a"), load_state(root, "b")
    assert (a.cluster, b.cluster) == ("a", "b")
    assert (a.state.cluster.name, b.state.cluster.name) == ("a", "b")
    assert a.state.cluster.partitions[1].max_time == "01:00:00"
    assert b.state.cluster.partitions[1].max_time == "02:00:00"
    assert b.state.cluster.partitions[1].params == {"PriorityTier": 10}  # the rest of the item comes from the base
    assert [str(loc) for loc in b.trace[MAX_TIME]] == ["bases/common/cluster.yaml:46:7", "clusters/b/cluster.yaml:5:7"]
    assert str(b.locations[MAX_TIME]) == "clusters/b/cluster.yaml:5:7"
    assert [str(loc) for loc in a.trace[MAX_TIME]] == ["bases/common/cluster.yaml:46:7"]
    assert str(a.where(("nodes", 0, "host"))) == "bases/common/nodes.yaml:11:5"
    assert a.root == root and root / "clusters" / "a" / "overlay.yaml" in a.files


def test_bases_merge_in_the_overlay_order_then_the_cluster(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "bases" / "h100").mkdir()
    (root / "bases" / "h100" / "gpus.yaml").write_text('cluster:\n  partitions:\n    - name: debug\n'
                                                        '      MaxTime: "03:00:00"\n    - name: h100\n'
                                                        "      nodes: dgx[03-04]\n")
    (root / "clusters" / "b" / "overlay.yaml").write_text("bases:\n  - common\n  - h100\n")
    b = load_cluster(root, "b")
    assert [p.name for p in b.state.cluster.partitions] == ["gpu", "debug", "h100"]
    assert [str(loc) for loc in b.trace[MAX_TIME]] == ["bases/common/cluster.yaml:46:7", "bases/h100/gpus.yaml:4:7",
                                                       "clusters/b/cluster.yaml:5:7"]


def test_a_bad_overridden_value_is_reported_at_the_overlay_file_line(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "clusters" / "b" / "cluster.yaml").write_text(
        'cluster:\n  name: b\n  partitions:\n    - name: debug\n      MaxTime: "soon"\n')
    errors = _errors(root, "b")
    bad = [e for e in errors if e.key_path() == "cluster.partitions[1].MaxTime"]
    assert len(bad) == 1 and str(bad[0].location) == "clusters/b/cluster.yaml:5:7", [str(e) for e in errors]
    load_state(root, "a")  # the other cluster is not touched by it


def test_a_base_file_source_is_read_relative_to_the_base(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "bases" / "common" / "motd.txt").write_text("welcome\n")
    (root / "bases" / "common" / "files.yaml").write_text(
        "files:\n  - path: /etc/motd\n    source: motd.txt\n    roles: [login]\n")
    assert load_state(root, "a").state.files[0].text() == "welcome\n"
    (root / "bases" / "common" / "files.yaml").write_text(
        "files:\n  - path: /etc/motd\n    source: ../../../outside.txt\n    roles: [login]\n")
    (tmp_path.parent / "outside.txt").write_text("x\n")
    errors = _errors(root, "a")
    assert any("outside the desired-state repository" in e.message and e.location is not None
               and e.location.file == "bases/common/files.yaml" for e in errors), [str(e) for e in errors]


# ---- hostile or wrong layouts: each a clear error -------------------------------------------------------------

@pytest.mark.parametrize(("bases", "message"), [
    ("[common, ../clusters/a]", "'../clusters/a' is not a base name"),
    ("[/etc]", "'/etc' is not a base name"),
    ("[common, nope]", "no base 'nope': bases/nope/ does not exist (bases: common)"),
    ("[common, common]", "base 'common' is listed twice"),
    ("common", "expected a list of base names"),
])
def test_a_hostile_overlay_is_a_clear_error_at_its_line(tmp_path: Path, bases: str, message: str) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "clusters" / "b" / "overlay.yaml").write_text(f"# the bases\nbases: {bases}\n")
    errors = _errors(root, "b")
    found = [e for e in errors if message in e.message]
    assert found, [str(e) for e in errors]
    assert found[0].location is not None and found[0].location.file == "clusters/b/overlay.yaml"
    assert found[0].location.line == 2


def test_a_base_linking_outside_bases_is_refused(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path / "repo")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.yaml").write_text("cluster:\n  name: evil\n")
    os.symlink(outside, root / "bases" / "evil")
    (root / "clusters" / "b" / "overlay.yaml").write_text("bases: [common, evil]\n")
    errors = _errors(root, "b")
    assert any("links outside bases/" in e.message for e in errors), [str(e) for e in errors]


def test_overlay_yaml_takes_only_bases(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "clusters" / "b" / "overlay.yaml").write_text("bases: [common]\nbase: [h100]\n")
    errors = _errors(root, "b")
    assert any(str(e.location) == "clusters/b/overlay.yaml:2:1" and "only `bases:`" in e.message for e in errors)


def test_a_stray_top_level_yaml_file_of_a_multi_cluster_repository_is_refused(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "cluster.yaml").write_text("cluster:\n  name: lost\n")
    errors = _errors(root, "a")
    assert any(e.location is not None and e.location.file == "cluster.yaml" and "move this file" in e.message
               for e in errors)


def test_naming_the_cluster_is_required_exactly_when_there_are_clusters(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path / "repo")
    (only,) = _errors(root, None)
    assert only.message == "this repository holds clusters a, b: name one with --cluster"
    (unknown,) = _errors(root, "c")
    assert "no cluster 'c'" in unknown.message and "(clusters: a, b)" in unknown.message
    (single,) = _errors(EXAMPLE, "a")
    assert "single-cluster" in single.message and "no clusters/ directory" in single.message


def test_a_cluster_with_an_error_in_a_base_names_the_base_file(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    rollout = root / "bases" / "common" / "rollout.yaml"
    rollout.write_text(rollout.read_text() + "bogus_key: 1\n")
    for cluster in ("a", "b"):
        errors = _errors(root, cluster)
        assert any(e.location is not None and e.location.file == "bases/common/rollout.yaml"
                   and e.key_path() == "bogus_key" for e in errors), [str(e) for e in errors]


# ---- the single-cluster repository: unchanged ------------------------------------------------------------------

def test_the_bundled_desired_state_loads_exactly_as_before() -> None:
    before, now = load_dir(EXAMPLE), load_state(EXAMPLE, None)
    assert now.state.model_dump(mode="json") == before.state.model_dump(mode="json")
    assert now.locations == before.locations and now.files == before.files
    assert (now.cluster, now.trace) == (None, {})
    assert cluster_names(EXAMPLE) == []


@pytest.mark.parametrize("link", ["bases", "clusters/b"])
def test_a_layer_directory_linking_outside_the_repository_is_refused(tmp_path: Path, link: str) -> None:
    root = two_cluster_repo(tmp_path / "repo")
    moved = tmp_path / "elsewhere"
    (root / link).rename(moved)
    os.symlink(moved, root / link)
    errors = _errors(root, "b")
    assert [e.message for e in errors] == [f"{link}/ leads outside the repository: refused"]
