"""The loader: the example validates; every planted fault is reported with file:line and key path."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.desired.loader import ConfigError, DesiredStateError, load_dir
from tests.desired_fixtures import EXAMPLE, append, plant

ERROR_LINE = re.compile(r"^error: (?P<file>[\w.-]+):(?P<line>\d+):(?P<col>\d+): (?P<path>\S+): (?P<msg>.*)$")


def _reconciler(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed `reconciler` console script (as `pip install -e .` made it)."""
    exe = shutil.which("reconciler") or str(Path(sys.executable).with_name("reconciler"))
    if not Path(exe).exists():
        pytest.skip("the reconciler console script is not installed (pip install -e .)")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)


def _errors(directory: Path) -> list[ConfigError]:
    with pytest.raises(DesiredStateError) as info:
        load_dir(directory)
    return info.value.errors


def _one(errors: list[ConfigError], key_path: str) -> ConfigError:
    found = [e for e in errors if e.key_path() == key_path]
    assert len(found) == 1, f"expected one error at {key_path}, got {[str(e) for e in errors]}"
    return found[0]


def _at(error: ConfigError, file: str, line: int) -> None:
    assert error.location is not None, str(error)
    assert (error.location.file, error.location.line) == (file, line), str(error)


def test_example_validates_with_console_script() -> None:
    """`reconciler validate desired-state/` exits 0 and says so."""
    result = _reconciler("validate", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    assert result.stderr == ""


def test_example_loads() -> None:
    """The example describes the cluster of issue 2: 6 nodes, 2 partitions, NFS, an image, a patch, NCCL."""
    loaded = load_dir(EXAMPLE)
    state = loaded.state
    assert [p.name for p in state.cluster.partitions] == ["gpu", "debug"]
    assert {m.mountpoint for m in state.storage.mounts} == {"/home", "/shared"}
    assert state.images[0].uri == "docker://nvcr.io#nvidia/pytorch:24.04-py3"
    assert any("rxdm" in p.path for p in state.patches)
    assert state.checks.nccl and state.checks.nccl[0].schedule
    assert loaded.where(("cluster", "partitions", 1, "nodes")) is not None


def test_four_planted_faults(example_copy: Path) -> None:
    """A misspelled key, a wrong type, a duplicate node and an unknown partition node: exit 1, four errors."""
    cluster, nodes = example_copy / "cluster.yaml", example_copy / "nodes.yaml"
    expected = {
        ("cluster.yaml", plant(cluster, "    SlurmdPort: 6818\n", "    SlurmdPrt: 6818\n")): (
            "cluster.slurm_conf.SlurmdPrt",
            "did you mean SlurmdPort",
        ),
        ("cluster.yaml", plant(cluster, "      CPUs: 224\n", "      CPUs: lots\n")): (
            "cluster.node_sets[0].CPUs",
            "valid integer",
        ),
        ("cluster.yaml", plant(cluster, "      nodes: dgx[01-02]\n", "      nodes: dgx[01-02],ghost07\n")): (
            "cluster.partitions[1].nodes",
            "ghost07",
        ),
        ("nodes.yaml", append(nodes, "  - name: nfs01\n    host: 10.0.0.21\n")): (
            "nodes[3].name",
            "duplicate node 'nfs01'",
        ),
    }
    result = _reconciler("validate", str(example_copy))
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 4, result.stderr
    assert "4 error(s)" in result.stderr
    assert "nothing was applied" in result.stderr
    found = {}
    for line in lines:
        match = ERROR_LINE.match(line)
        assert match, line
        found[(match["file"], int(match["line"]))] = (match["path"], match["msg"])
    assert found.keys() == expected.keys()
    for where, (path, hint) in expected.items():
        assert found[where][0] == path, (where, found[where])
        assert hint in found[where][1], (where, found[where])


def test_all_errors_reported_not_only_the_first(example_copy: Path) -> None:
    """Schema errors in several files and a cross-check error all come out in one run."""
    plant(example_copy / "images.yaml", "    import_on: login01", "    import_on: login01\n    tag: x")
    plant(example_copy / "checks.yaml", "      timeout: 15m", "      timeout: soon")
    plant(example_copy / "storage.yaml", "      mountpoint: /shared", "      mountpoint: /home")
    errors = _errors(example_copy)
    assert {e.location.file for e in errors if e.location} == {"images.yaml", "checks.yaml", "storage.yaml"}


def test_duplicate_yaml_key(example_copy: Path) -> None:
    """A key written twice in one mapping is an error at the second one, with its key path."""
    line = plant(
        example_copy / "cluster.yaml",
        "    SlurmdPort: 6818\n",
        "    SlurmdPort: 6818\n    SlurmdPort: 6819\n",
    )
    error = _one(_errors(example_copy), "cluster.slurm_conf.SlurmdPort")
    _at(error, "cluster.yaml", line + 1)
    assert "duplicate key" in error.message


def test_duplicate_key_in_list_item(example_copy: Path) -> None:
    """The key path of a duplicate inside a list item names the item."""
    line = plant(
        example_copy / "storage.yaml",
        "      mountpoint: /home\n      type: nfs\n",
        "      mountpoint: /home\n      type: nfs\n      type: nfs4\n",
    )
    error = _one(_errors(example_copy), "storage.mounts[0].type")
    _at(error, "storage.yaml", line + 2)


def test_top_level_key_in_two_files(example_copy: Path) -> None:
    """A mapping key such as `storage` may live in one file only."""
    (example_copy / "zz-extra.yaml").write_text("# more storage\nstorage:\n  mounts: []\n")
    error = _one(_errors(example_copy), "storage")
    _at(error, "zz-extra.yaml", 2)
    assert "storage.yaml:3:1" in error.message


def test_yaml_syntax_error(example_copy: Path) -> None:
    """A YAML syntax error is reported at its file and line, and no 'missing key' noise follows."""
    line = plant(
        example_copy / "storage.yaml",
        "      path: /export/home\n",
        "      path: /export/home\n     broken: indentation\n",
    )
    errors = _errors(example_copy)
    assert len(errors) == 1, [str(e) for e in errors]
    _at(errors[0], "storage.yaml", line + 1)
    assert "invalid YAML" in errors[0].message


def test_tab_indentation(example_copy: Path) -> None:
    """A tab is a YAML syntax error with its line."""
    line = plant(example_copy / "images.yaml", "    import_on: login01", "\timport_on: login01")
    errors = _errors(example_copy)
    _at(errors[0], "images.yaml", line)


@pytest.mark.parametrize(
    ("file", "old", "new", "key_path"),
    [
        (
            "storage.yaml",
            "      mountpoint: /home\n",
            "      mountpoint: home\n",
            "storage.mounts[0].mountpoint",
        ),
        (
            "storage.yaml",
            "      path: /export/shared\n",
            "      path: export/shared\n",
            "storage.exports[1].path",
        ),
        ("cluster.yaml", "  prolog: /opt", "  prolog: opt", "cluster.prolog"),
        ("cluster.yaml", "    program: /usr/sbin/nhc", "    program: nhc", "cluster.health_check.program"),
        (
            "patches.yaml",
            "    path: /opt/apps/adm/slurm/scripts/rxdm",
            "    path: scripts/rxdm",
            "patches[0].path",
        ),
        ("images.yaml", "    path: /shared/images", "    path: shared/images", "images[0].path"),
        (
            "checks.yaml",
            "      mounts: [/home, /shared]",
            "      mounts: [/home, shared]",
            "checks.node[0].mounts[1]",
        ),
        (
            "checks.yaml",
            "      schedule: daily",
            "      env_profile: nccl-env.sh\n      schedule: daily",
            "checks.nccl[0].env_profile",
        ),
        (
            "cluster.yaml",
            "    StateSaveLocation: /var/lib/slurm/slurmctld\n",
            "    StateSaveLocation: var/spool\n",
            "cluster.slurm_conf.StateSaveLocation",
        ),
    ],
)
def test_relative_paths(example_copy: Path, file: str, old: str, new: str, key_path: str) -> None:
    """Paths that are not absolute are errors at their key."""
    line = plant(example_copy / file, old, new)
    error = _one(_errors(example_copy), key_path)
    _at(error, file, line)
    assert "absolute" in error.message


def test_two_mounts_on_one_mountpoint(example_copy: Path) -> None:
    """Two mounts on /home of the same node."""
    line = plant(example_copy / "storage.yaml", "      mountpoint: /shared\n", "      mountpoint: /home\n")
    error = _one(_errors(example_copy), "storage.mounts[1].mountpoint")
    _at(error, "storage.yaml", line)
    assert "two mounts on /home" in error.message


def test_mount_naming_unknown_node(example_copy: Path) -> None:
    """A mount's nodes must be in the inventory."""
    line = plant(
        example_copy / "storage.yaml",
        "      nodes: login01,dgx[01-04]\n    - source",
        "      nodes: login01,dgx[01-05]\n    - source",
    )
    error = _one(_errors(example_copy), "storage.mounts[0].nodes")
    _at(error, "storage.yaml", line)
    assert "dgx05" in error.message


def test_exports_without_nfs_server(example_copy: Path) -> None:
    """Exports with no node of role nfs-server."""
    plant(example_copy / "nodes.yaml", "    roles: [nfs-server]\n", "    roles: [storage]\n")
    error = _one(_errors(example_copy), "storage.exports")
    _at(error, "storage.yaml", 4)
    assert "nfs-server" in error.message


def test_node_in_two_node_sets(example_copy: Path) -> None:
    """A node may be in one node set only."""
    line = plant(
        example_copy / "cluster.yaml", "  partitions:\n", "    - nodes: dgx04\n      CPUs: 8\n  partitions:\n"
    )
    error = _one(_errors(example_copy), "cluster.node_sets[1].nodes")
    _at(error, "cluster.yaml", line)
    assert "dgx04" in error.message and "two node sets" in error.message


def test_check_naming_unknown_nodes(example_copy: Path) -> None:
    """A node check naming a node outside the inventory."""
    line = plant(example_copy / "checks.yaml", "      nodes: dgx[01-04]\n", "      nodes: dgx[01-04],gpu99\n")
    error = _one(_errors(example_copy), "checks.node[0].nodes")
    _at(error, "checks.yaml", line)
    assert "gpu99" in error.message


def test_check_naming_unknown_partition(example_copy: Path) -> None:
    """An NCCL check naming a partition that does not exist."""
    line = plant(example_copy / "checks.yaml", "      partition: gpu\n", "      partition: gpux\n")
    error = _one(_errors(example_copy), "checks.nccl[0].partition")
    _at(error, "checks.yaml", line)
    assert "gpux" in error.message


def test_invalid_hostlist_in_partition(example_copy: Path) -> None:
    """A hostlist that Slurm would reject is an error at its key, with the reason."""
    line = plant(example_copy / "cluster.yaml", "      nodes: dgx[01-02]\n", "      nodes: dgx[01-02]x\n")
    error = _one(_errors(example_copy), "cluster.partitions[1].nodes")
    _at(error, "cluster.yaml", line)
    assert "invalid hostlist" in error.message


def test_duplicate_node_in_another_file(example_copy: Path) -> None:
    """`nodes:` lists of several files are merged; a duplicate points at its own file and line."""
    (example_copy / "zz-nodes.yaml").write_text("nodes:\n  - name: login01\n  - name: gpu[1-2]\n")
    error = _one(_errors(example_copy), "nodes[3].name")
    _at(error, "zz-nodes.yaml", 2)
    assert "login01" in error.message


def test_cli_validate_exit_code_and_stream(example_copy: Path) -> None:
    """Errors go to stderr, nothing to stdout, exit code 1."""
    plant(example_copy / "checks.yaml", "      partition: gpu\n", "      partition: gpux\n")
    result = CliRunner().invoke(main, ["validate", str(example_copy)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "checks.yaml:33:" in result.stderr


def test_not_a_directory(tmp_path: Path) -> None:
    """A missing directory and an empty one are errors too."""
    assert "not a directory" in str(_errors(tmp_path / "missing")[0])
    assert "no YAML files" in str(_errors(tmp_path)[0])


def test_raw_nel_is_refused_at_its_line_not_folded_into_a_space(tmp_path: Path) -> None:
    """YAML reads U+0085 as a line break and folds it into a space: the file is refused where it stands."""
    import shutil

    from reconciler.desired.loader import DesiredStateError, load_dir

    state = tmp_path / "state"
    shutil.copytree(Path(__file__).resolve().parents[2] / "desired-state", state)
    cluster = state / "cluster.yaml"
    lines = cluster.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if "SlurmUser: slurm" in line)
    lines[number] = lines[number].replace("SlurmUser: slurm", "SlurmUser: slu\x85rm")
    cluster.write_text("".join(lines))
    with pytest.raises(DesiredStateError) as caught:
        load_dir(state)
    [error] = caught.value.errors
    assert error.location is not None and error.location.file == "cluster.yaml"
    assert error.location.line == number + 1 and "U+0085" in error.message


@pytest.mark.parametrize(("source", "ok"), [("nfs01:/export/shared/projects", True), ("nfs01:/export/shared/", True),
                                            ("nfs01:/export/sharedx", False), ("nfs01:/export", False)])
def test_mount_of_an_export_or_a_directory_below_it(example_copy: Path, source: str, ok: bool) -> None:
    """NFS mounts a subdirectory of an export; a sibling or a parent of an export is not exported."""
    plant(example_copy / "storage.yaml", "    - source: nfs01:/export/shared\n", f"    - source: {source}\n")
    try:
        load_dir(example_copy)
        errors: list[str] = []
    except DesiredStateError as exc:
        errors = [e.message for e in exc.errors]
    assert (errors == []) is ok, errors
    assert ok or any("is not exported" in e for e in errors)


def test_canary_naming_unknown_nodes(example_copy: Path) -> None:
    """A canary hostlist must name inventory nodes; a count or a percentage is always fine."""
    (example_copy / "rollout.yaml").write_text("rollout:\n  canary: dgx[04-05]\n")
    error = _one(_errors(example_copy), "rollout.canary")
    _at(error, "rollout.yaml", 2)
    assert "dgx05" in error.message and "dgx04" not in error.message
    (example_copy / "rollout.yaml").write_text("rollout:\n  canary: 10%\n  steps: [2, 100%]\n")
    load_dir(example_copy)
