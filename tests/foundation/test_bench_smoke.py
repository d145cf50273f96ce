"""The scale benchmark's generated desired state is valid and renders (figures live in bench/, not here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.render_scale import main, render_all, write_desired_state
from reconciler.inventory import node_specs
from reconciler.loader import load_dir
from reconciler.render import render_file


def test_generated_state_validates_and_renders(tmp_path: Path) -> None:
    """A 100-node state from the benchmark loads without errors and renders every node's files."""
    write_desired_state(tmp_path, 100)
    state = load_dir(tmp_path).state
    assert len(node_specs(state)) == 102
    assert render_all(state, "bench") > 0
    fstab = render_file(state, "gpu00050", "fstab", "bench")
    assert "/lustre" in fstab and "/home" in fstab
    assert "/lustre" not in render_file(state, "gpu00051", "fstab", "bench")
    assert "NodeName=gpu[00001-00025] " in render_file(state, "login01", "slurm.conf", "bench")


def test_bench_main_prints_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.render_scale` prints one row per size."""
    assert main(["--sizes", "40,80", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[0] == "nodes"
    assert [line.split()[0] for line in out.splitlines()[1:3]] == ["42", "82"]
