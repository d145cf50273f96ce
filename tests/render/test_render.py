"""Renderers: deterministic, one slurm.conf for every node, the exports/fstab managed blocks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.desired.source import describe_source
from reconciler.render import managed_files_for, render_file
from reconciler.render.blocks import BEGIN, END, BlockError, block_body, find_block, replace_block
from reconciler.render.common import slurm_value
from reconciler.render.files import UnknownNodeError, file_path
from reconciler.render.slurm_conf import render_slurm_conf
from tests.desired_fixtures import EXAMPLE, plant

NODES = ["login01", "nfs01", "dgx01", "dgx02", "dgx03", "dgx04"]


def _cli_render(directory: Path, node: str, name: str | None = None) -> bytes:
    args = ["render", str(directory), "--node", node, *(["--file", name] if name else [])]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def test_example_inventory_is_the_expected_one() -> None:
    """The nodes this file iterates over are exactly the example's inventory."""
    assert sorted(node_specs(load_dir(EXAMPLE).state)) == sorted(NODES)


def test_slurm_conf_same_bytes_for_every_node_and_twice() -> None:
    """`reconciler render desired-state/ --node X --file slurm.conf`: same bytes for every node, twice."""
    outputs = {(node, run): _cli_render(EXAMPLE, node, "slurm.conf") for node in NODES for run in range(2)}
    assert len(set(outputs.values())) == 1
    text = next(iter(outputs.values())).decode()
    assert text.startswith("# slurm.conf: managed by reconciler from desired-state")
    assert "\nNodeName=dgx[01-04] " in text
    assert "\nPartitionName=gpu Nodes=dgx[01-04] Default=YES " in text


def test_console_script_prints_the_same_bytes() -> None:
    """The installed console script prints what the CLI runner saw, twice in a row."""
    exe = shutil.which("reconciler")
    if exe is None:
        pytest.skip("the reconciler console script is not installed (pip install -e .)")
    runs = [
        subprocess.run(
            [exe, "render", str(EXAMPLE), "--node", node, "--file", "slurm.conf"],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
        for node in ("dgx03", "login01")
    ]
    assert runs[0] == runs[1] == _cli_render(EXAMPLE, "nfs01", "slurm.conf")


@pytest.mark.parametrize("name", ["slurm.conf", "gres.conf", "cgroup.conf", "exports", "fstab"])
def test_every_file_deterministic_across_loads(name: str) -> None:
    """Two separate loads of the same directory render byte-identical files."""
    first, second = load_dir(EXAMPLE).state, load_dir(EXAMPLE).state
    for node in NODES:
        assert render_file(first, node, name, "src") == render_file(second, node, name, "src")


def test_header_names_the_source_and_commit() -> None:
    """The header comment names where the state came from, with the commit when known."""
    state = load_dir(EXAMPLE).state
    source = describe_source(EXAMPLE, "0123456789abcdef0123")
    assert source == "desired-state @ 0123456789ab"
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        first = render_file(state, "dgx01", name, source).splitlines()[0]
        assert first == f"# {name}: managed by reconciler from desired-state @ 0123456789ab."
    assert describe_source(Path("/nonexistent/ds")) == "ds"


def test_managed_files_per_node() -> None:
    """Slurm nodes get the Slurm files; the NFS server only its exports; clients their fstab."""
    state = load_dir(EXAMPLE).state
    assert managed_files_for(state, "nfs01") == ["exports"]
    for node in ("login01", "dgx01"):
        assert managed_files_for(state, node) == ["slurm.conf", "gres.conf", "cgroup.conf", "fstab"]
    assert file_path(state, "slurm.conf") == "/etc/slurm/slurm.conf"
    assert file_path(state, "fstab") == "/etc/fstab"
    with pytest.raises(UnknownNodeError):
        managed_files_for(state, "nope")


def test_exports_block() -> None:
    """The managed block of /etc/exports on the NFS server, and none elsewhere."""
    text = _cli_render(EXAMPLE, "nfs01", "exports").decode()
    assert text == (
        f"{BEGIN}\n"
        "/export/home 10.0.0.0/24(rw,sync,no_subtree_check,no_root_squash)\n"
        "/export/shared 10.0.0.0/24(rw,sync,no_subtree_check)\n"
        f"{END}\n"
    )
    assert _cli_render(EXAMPLE, "dgx01", "exports").decode() == f"{BEGIN}\n{END}\n"


def test_fstab_block() -> None:
    """The managed block of /etc/fstab on each client, and an empty one on the server."""
    expected = (
        f"{BEGIN}\n"
        "nfs01:/export/home /home nfs defaults,_netdev 0 0\n"
        "nfs01:/export/shared /shared nfs defaults,_netdev 0 0\n"
        f"{END}\n"
    )
    for node in ("login01", "dgx01", "dgx04"):
        assert _cli_render(EXAMPLE, node, "fstab").decode() == expected
    assert _cli_render(EXAMPLE, "nfs01", "fstab").decode() == f"{BEGIN}\n{END}\n"


def test_fstab_follows_mount_hostlist(example_copy: Path) -> None:
    """A mount on part of a hostlist lands in the fstab of exactly those nodes."""
    plant(
        example_copy / "storage.yaml",
        "      nodes: login01,dgx[01-04]\n    - source",
        "      nodes: dgx[02-03]\n    - source",
    )
    state = load_dir(example_copy).state
    has_home = {n for n in NODES if "/home" in render_file(state, n, "fstab", "src")}
    assert has_home == {"dgx02", "dgx03"}


def test_render_all_files_of_a_node() -> None:
    """Without --file, every managed file of the node, each under its name."""
    text = _cli_render(EXAMPLE, "dgx01").decode()
    assert [line for line in text.splitlines() if line.startswith("==> ")] == [
        "==> slurm.conf <==",
        "==> gres.conf <==",
        "==> cgroup.conf <==",
        "==> fstab <==",
    ]


def test_render_unknown_node_fails() -> None:
    """An unknown node is an error, exit 1."""
    result = CliRunner().invoke(main, ["render", str(EXAMPLE), "--node", "ghost", "--file", "slurm.conf"])
    assert result.exit_code == 1
    assert "ghost" in result.stderr


def test_slurm_conf_canonical_hostlists(example_copy: Path) -> None:
    """Hostlists are written folded and sorted, whatever order the YAML used."""
    plant(example_copy / "cluster.yaml", "      nodes: dgx[01-02]\n", "      nodes: dgx02,dgx[01]\n")
    text = render_slurm_conf(load_dir(example_copy).state.cluster, "src")
    assert "\nPartitionName=debug Nodes=dgx[01-02] " in text


def test_slurm_values_with_spaces_are_quoted() -> None:
    """Values with blanks are quoted; `#` and `\\` are escaped (Slurm reads `"x#y"` as `"x`); booleans are YES/NO."""
    assert slurm_value("a b") == '"a b"'
    assert slurm_value("x#y") == "x\\#y"
    assert slurm_value("a\\b c") == '"a\\\\b c"'
    assert slurm_value(True) == "YES"
    assert slurm_value(5) == "5"


ADMIN_FSTAB = """\
# /etc/fstab: static file system information.
UUID=1234 / ext4 errors=remount-ro 0 1
{block}/dev/sdb1 /scratch xfs defaults 0 2
# trailing admin comment
"""


def test_replace_block_keeps_lines_outside() -> None:
    """Only the lines between the markers change; the admin's lines before and after stay as they were."""
    old = ADMIN_FSTAB.format(block=f"{BEGIN}\nold:/x /x nfs defaults 0 0\n{END}\n")
    new = replace_block(old, ["nfs01:/export/home /home nfs defaults 0 0"])
    assert new == ADMIN_FSTAB.format(block=f"{BEGIN}\nnfs01:/export/home /home nfs defaults 0 0\n{END}\n")
    assert block_body(new) == ["nfs01:/export/home /home nfs defaults 0 0"]
    assert replace_block(new, ["nfs01:/export/home /home nfs defaults 0 0"]) == new


def test_replace_block_appends_and_removes() -> None:
    """A missing block is appended at the end; None removes it and leaves the rest."""
    bare = ADMIN_FSTAB.format(block="")
    added = replace_block(bare, ["a b c d 0 0"])
    assert added == bare + f"{BEGIN}\na b c d 0 0\n{END}\n"
    assert find_block(added) is not None
    assert replace_block(added, None) == bare
    assert replace_block(bare, None) == bare
    assert replace_block("", ["x"]) == f"{BEGIN}\nx\n{END}\n"


def test_replace_block_without_final_newline() -> None:
    """A file whose last line lacks a newline still keeps every line."""
    assert replace_block("a\nb", ["x"]) == f"a\nb\n{BEGIN}\nx\n{END}\n"


@pytest.mark.parametrize(
    "text", [f"{BEGIN}\nx\n", f"x\n{END}\n", f"{END}\n{BEGIN}\n", f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n"]
)
def test_broken_markers_are_refused(text: str) -> None:
    """BEGIN without END (or the reverse, or two blocks) is refused, not guessed at."""
    with pytest.raises(BlockError):
        replace_block(text, ["y"])


def test_first_block_adopts_identical_hand_written_lines() -> None:
    """A line written by hand before adoption moves into the new block; it is not written twice."""
    from reconciler.render.blocks import BEGIN, END, replace_block

    text = "# local\n/dev/sda1 / ext4 defaults 0 1\nnfs01:/export/home  /home nfs defaults 0 0\n"
    out = replace_block(text, ["nfs01:/export/home /home nfs defaults 0 0"])
    assert out == (f"# local\n/dev/sda1 / ext4 defaults 0 1\n{BEGIN}\nnfs01:/export/home /home nfs defaults 0 0\n"
                   f"{END}\n")
