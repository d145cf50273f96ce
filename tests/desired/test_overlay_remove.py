"""Overlays that remove and merge by key (issue 47 item 6): `$remove` items and the keyed lists of overlay.py.

The merge on plain data (a location is `L<layer>:<path>`), then through the real loader and the real
`reconciler explain` on a repository of real files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.desired.clusters import load_state
from reconciler.desired.errors import DesiredStateError
from reconciler.desired.loader import load_dir
from reconciler.desired.overlay import Removal
from tests.desired.cluster_repo import two_cluster_repo
from tests.desired.test_clusters import merge_files
from tests.desired_fixtures import EXAMPLE

# ---- the merge ---------------------------------------------------------------------------------------------------


def test_a_named_item_is_removed_by_name_and_the_rest_renumbered_with_their_places() -> None:
    base = {"cluster": {"partitions": [{"name": "gpu", "State": "UP"}, {"name": "debug"}, {"name": "cpu"}]}}
    over = {"cluster": {"partitions": [{"$remove": "gpu"}, {"name": "cpu", "State": "DOWN"}]}}
    merged = merge_files(base, over)
    assert merged.data == {"cluster": {"partitions": [{"name": "debug"}, {"name": "cpu", "State": "DOWN"}]}}
    assert not merged.problems
    assert merged.locations[("cluster", "partitions", 0, "name")] == "L0:cluster.partitions.1.name"
    assert merged.trace[("cluster", "partitions", 1, "State")] == ["L1:cluster.partitions.1.State"]
    assert ("cluster", "partitions", 2) not in merged.locations and ("cluster", "partitions", 2) not in merged.trace
    assert merged.removed == {("cluster", "partitions"): [
        Removal("name", "gpu", "L1:cluster.partitions.0", "L0:cluster.partitions.0")]}


def test_files_mounts_and_node_sets_merge_by_their_key() -> None:
    base = {"files": [{"path": "/etc/motd", "content": "a", "mode": "0644"}, {"path": "/etc/x", "content": "x"}],
            "storage": {"mounts": [{"mountpoint": "/home", "source": "a:/h"}]},
            "cluster": {"node_sets": [{"nodes": "gpu[01-02]", "CPUs": 8}]}}
    over = {"files": [{"path": "/etc/motd", "content": "b"}, {"path": "/etc/issue", "content": "i"}],
            "storage": {"mounts": [{"mountpoint": "/home", "source": "b:/h"}, {"mountpoint": "/w", "source": "w"}]},
            "cluster": {"node_sets": [{"nodes": "gpu[01-02]", "RealMemory": 9}]}}
    merged = merge_files(base, over)
    assert merged.data["files"] == [{"path": "/etc/motd", "content": "b", "mode": "0644"},
                                    {"path": "/etc/x", "content": "x"}, {"path": "/etc/issue", "content": "i"}]
    assert merged.data["storage"]["mounts"] == [{"mountpoint": "/home", "source": "b:/h"},
                                                {"mountpoint": "/w", "source": "w"}]
    assert merged.data["cluster"]["node_sets"] == [{"nodes": "gpu[01-02]", "CPUs": 8, "RealMemory": 9}]
    assert merged.trace[("files", 0, "content")] == ["L0:files.0.content", "L1:files.0.content"]
    assert merged.locations[("files", 0, "mode")] == "L0:files.0.mode"
    assert merged.locations[("files", 2)] == "L1:files.1"
    assert not merged.problems


def test_a_keyed_remove_then_an_item_with_the_same_key_replaces_the_item_whole() -> None:
    base = {"files": [{"path": "/etc/motd", "content": "a", "mode": "0600"}, {"path": "/etc/x", "content": "x"}]}
    over = {"files": [{"$remove": "/etc/motd"}, {"path": "/etc/motd", "source": "motd"}]}
    merged = merge_files(base, over)
    assert merged.data["files"] == [{"path": "/etc/x", "content": "x"}, {"path": "/etc/motd", "source": "motd"}]
    assert merged.locations[("files", 0)] == "L0:files.1" and merged.locations[("files", 1)] == "L1:files.1"
    assert ("files", 1, "mode") not in merged.locations
    assert merged.removed[("files",)] == [Removal("path", "/etc/motd", "L1:files.0", "L0:files.0")]


def test_an_empty_list_still_empties_and_unkeyed_lists_are_still_replaced_whole() -> None:
    merged = merge_files({"files": [{"path": "/a", "content": "a"}], "roles": ["x", "y"]}, {"files": [], "roles": ["z"]})
    assert merged.data == {"files": [], "roles": ["z"]} and not merged.problems


def test_a_remove_in_a_layer_that_removes_from_several_layers_and_a_third_layer_adds_back() -> None:
    merged = merge_files({"files": [{"path": "/a", "nodes": "n1"}, {"path": "/a", "nodes": "n2"}]},
                         {"files": [{"$remove": "/a"}]}, {"files": [{"path": "/a", "nodes": "n3"}]})
    assert merged.data["files"] == [{"path": "/a", "nodes": "n3"}]  # every earlier item with that key goes
    assert [r.was for r in merged.removed[("files",)]] == ["L0:files.0", "L0:files.1"]


@pytest.mark.parametrize(("layers", "where", "message"), [
    # removal acts on earlier layers only: the name exists only in this same layer
    ([{"p": [{"name": "a"}]}, {"p": [{"$remove": "b"}, {"name": "b"}]}], ("p", 0),
     "$remove: b: no item with name 'b' in p of the earlier layers (names: a); a $remove acts on earlier layers only"),
    ([{"p": [{"name": "a"}]}, {"p": [{"$remove": "a", "name": "c"}]}], ("p", 0),
     "$remove stands alone in its list item (here beside name)"),
    ([{"p": [{"name": "a"}]}, {"p": [{"$remove": ["a"]}]}], ("p", 0), "$remove takes the name (or key) of one item"),
    ([{"q": 1}, {"p": [{"$remove": "a"}]}], ("p", 0), "$remove: a: nothing to remove: no earlier layer sets p"),
    ([{"p": [{"$remove": "a"}]}], ("p", 0), "$remove: a: nothing to remove: no earlier layer sets p"),
    ([{"p": ["x"]}, {"p": [{"$remove": "x"}]}], ("p", 0), "p is replaced whole, not merged by item"),
    ([{"m": {"a": 1}}, {"m": {"$remove": "a"}}], ("m", "$remove"), "$remove removes list items only"),
    ([{"m": {"a": 1}}, {"n": {"k": {"$remove": "a"}}}], ("n", "k", "$remove"), "a mapping's key cannot be deleted"),
    ([{"m": {"a": 1}}, {"$remove": "m"}], ("$remove",), "$remove removes list items only"),
    ([{"p": [{"name": "a"}]}, {"p": [{"$remove": "a"}, {"$remove": "a"}]}], ("p", 1),
     "$remove: a: no item with name 'a' in p of the earlier layers (names: none left)"),
    ([{"files": [{"path": "/a", "nodes": "n1"}, {"path": "/a", "nodes": "n2"}]}, {"files": [{"path": "/a"}]}],
     ("files", 0), "2 earlier item(s) of files have path '/a' (L0:files.0, L0:files.1): which one to merge into is "
     "ambiguous; `- $remove: /a` first removes them"),
    ([{"files": [{"path": "/a"}]}, {"files": [{"path": "/a", "nodes": "1"}, {"path": "/a", "nodes": "2"}]}],
     ("files", 1), "and item 0 of this layer merges into it already"),
])
def test_a_remove_that_removes_nothing_or_an_ambiguous_keyed_merge_is_refused_at_its_place(
        layers: list[dict[str, object]], where: tuple[str | int, ...], message: str) -> None:
    merged = merge_files(*layers)
    assert [(loc, path) for loc, path, _ in merged.problems] == [(f"L{len(layers) - 1}:" + ".".join(map(str, where)),
                                                                  where)]
    assert message in merged.problems[0][2], merged.problems
    assert "$remove" not in repr(merged.data)  # never reaches the schema


# ---- through the loader and the command line ----------------------------------------------------------------------

BASE_FILES = """files:
  - path: /etc/motd
    nodes: login01
    content: "base motd\\n"
  - path: /etc/issue.net
    nodes: login01
    content: "base issue\\n"
"""
CLUSTER_FILES = """files:
  - $remove: /etc/motd
  - path: /etc/issue
    nodes: login01
    content: "cluster issue\\n"
  - path: /etc/issue.net
    mode: "0640"
"""


def _repo(tmp_path: Path, cluster_files: str = CLUSTER_FILES) -> Path:
    root = two_cluster_repo(tmp_path)
    (root / "bases" / "common" / "files.yaml").write_text(BASE_FILES)
    (root / "clusters" / "b" / "files.yaml").write_text(cluster_files)
    return root


def _run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args))


def test_a_cluster_removes_a_base_file_adds_its_own_and_explain_traces_both(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    a, b = load_state(root, "a"), load_state(root, "b")
    assert [f.path for f in a.state.files] == ["/etc/motd", "/etc/issue.net"]
    assert [(f.path, f.mode) for f in b.state.files] == [("/etc/issue.net", "0640"), ("/etc/issue", "0644")]
    assert b.state.files[0].content == "base issue\n"  # merged by path: the rest comes from the base
    result = _run("explain", "files", str(root), "--cluster", "b")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1:] == ["  set at clusters/b/files.yaml:1:1",
                         "  overrides [{\"path\": \"/etc/motd\", \"nodes\": \"login01\", \"content\": \"base motd\\n\"}, "
                         "{\"path\": \"/etc/issue.net\", \"nodes\": \"login01\", \"content\": \"base issue\\n\"}] "
                         "at bases/common/files.yaml:1:1",
                         "  removed /etc/motd (path; set at bases/common/files.yaml:2:5) by clusters/b/files.yaml:2:5"]
    result = _run("explain", "files./etc/motd", str(root), "--cluster", "b")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["files./etc/motd: removed by clusters/b/files.yaml:2:5 (path /etc/motd; "
                                          "set at bases/common/files.yaml:2:5)"]
    result = _run("explain", "files./etc/issue.content", str(root), "--cluster", "b")
    assert result.stdout.splitlines() == ["files./etc/issue.content = cluster issue", "",
                                          "  set at clusters/b/files.yaml:5:5"]
    result = _run("explain", "files.0.mode", str(root), "--cluster", "b")
    assert result.stdout.splitlines() == ["files.0.mode = 0640", "  set at clusters/b/files.yaml:7:5"]
    result = _run("explain", "files.0.content", str(root), "--cluster", "b")
    assert result.stdout.splitlines() == ["files.0.content = base issue", "",
                                          "  set at bases/common/files.yaml:7:5"]


def test_a_partition_of_the_base_is_removed_by_name(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "clusters" / "b" / "cluster.yaml").write_text("cluster:\n  name: b\n  partitions:\n    - $remove: debug\n")
    b = load_state(root, "b")
    assert [p.name for p in b.state.cluster.partitions] == ["gpu"]
    result = _run("explain", "cluster.partitions.debug", str(root), "--cluster", "b")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("cluster.partitions.debug: removed by clusters/b/cluster.yaml:4:7 (name debug; "
                                    "set at bases/common/cluster.yaml:")


def test_a_remove_naming_nothing_is_refused_at_its_file_line(tmp_path: Path) -> None:
    root = _repo(tmp_path, "files:\n  - path: /etc/issue\n    nodes: login01\n    content: x\n  - $remove: /etc/nope\n")
    with pytest.raises(DesiredStateError) as info:
        load_state(root, "b")
    assert [str(e) for e in info.value.errors] == [
        "clusters/b/files.yaml:5:5: files[1]: $remove: /etc/nope: no item with path '/etc/nope' in files of the "
        "earlier layers (paths: /etc/motd, /etc/issue.net); a $remove acts on earlier layers only"]
    load_state(root, "a")


def test_a_remove_beside_other_keys_is_refused_at_its_file_line(tmp_path: Path) -> None:
    root = _repo(tmp_path, "files:\n  - $remove: /etc/motd\n    path: /etc/motd\n")
    result = _run("validate", str(root), "--cluster", "b")
    assert result.exit_code == 1
    assert ("error: [cluster b] clusters/b/files.yaml:2:5: files[0]: $remove stands alone in its list item (here "
            "beside path)") in result.stderr, result.stderr


def test_a_remove_in_a_single_cluster_directory_is_refused_at_its_file_line(tmp_path: Path) -> None:
    root = tmp_path / "state"
    shutil.copytree(EXAMPLE, root)
    (root / "files.yaml").write_text("files:\n  - $remove: /etc/motd\n")
    with pytest.raises(DesiredStateError) as info:
        load_dir(root)
    assert [str(e) for e in info.value.errors] == [
        "files.yaml:2:5: files[0]: $remove: /etc/motd: nothing to remove: no earlier layer sets files"]


def _block(doc: str, after: str) -> str:
    """The first ```yaml block of DOC after the text AFTER."""
    start = doc.index("```yaml\n", doc.index(after)) + len("```yaml\n")
    return doc[start:doc.index("```", start)]


def test_the_documented_removal_example_merges_and_explains_as_documented(tmp_path: Path) -> None:
    doc = (EXAMPLE.parent / "docs" / "clusters.md").read_text()
    root = _repo(tmp_path, _block(doc, "and `clusters/lab/files.yaml`"))
    (root / "bases" / "common" / "files.yaml").write_text(_block(doc, "Example: `bases/common/files.yaml`"))
    b = load_state(root, "b")
    assert [(f.path, f.mode, f.content) for f in b.state.files] == [
        ("/etc/issue.net", "0640", "Authorized use only\n"), ("/etc/issue", "0644", "Lab cluster\n")]
    result = _run("explain", "files", str(root), "--cluster", "b")
    documented = "removed /etc/motd (path; set at bases/common/files.yaml:2:5) by clusters/lab/files.yaml:2:5"
    assert documented in " ".join(doc.split())
    assert result.stdout.splitlines()[-1] == "  " + documented.replace("clusters/lab", "clusters/b")
