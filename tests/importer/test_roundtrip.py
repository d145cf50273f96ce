"""Import real public Slurm configurations, validate, render, and compare by meaning with the originals.

The meaning parser (tests/slurm_meaning.py) is independent of the importer and the renderers: it ignores comments
and order, expands hostlists and merges NodeName=DEFAULT/PartitionName=DEFAULT.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.desired.loader import load_dir
from reconciler.render.files import render_file
from tests.shared_fixtures import shared_fixture
from tests.slurm_meaning import meaning_diff

ROOT = Path(__file__).resolve().parents[2]
# fixture -> the Slurm release family its keys belong to (SOURCE.md of each says why)
FAMILIES = {"deepops": "22.05", "openhpc": "23.11", "schedmd_gpu_example": "22.05", "slurm_gcp_a3mega": "23.11"}


@pytest.fixture
def configs() -> Path:
    """../shared/fixtures/slurm-thirdparty (the test is skipped when it is absent)."""
    return shared_fixture("slurm-thirdparty")


def run_import(source: Path | str, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`reconciler import SOURCE --out OUT ARGS`, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", "import", str(source), "--out", str(out), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def rendered_dir(state_dir: Path, out: Path) -> Path:
    """Render slurm.conf, gres.conf and cgroup.conf of the imported state into `out`."""
    loaded = load_dir(state_dir)
    node = loaded.state.cluster.controller_names[0]
    out.mkdir()
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        text = render_file(loaded.state, node, name, "roundtrip")
        if text:
            (out / name).write_text(text)
    return out


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_import_render_means_the_same(name: str, tmp_path: Path, configs: Path) -> None:
    result = run_import(configs / name, tmp_path / "state", "--slurm-version", FAMILIES[name])
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    rendered = rendered_dir(tmp_path / "state", tmp_path / "rendered")
    # NodeSet lines are resolved into the partitions' node lists (compared above them), so they are not rendered
    differences = [d for d in meaning_diff(configs / name, rendered) if not d.startswith("nodeset:")]
    assert not differences, "\n".join(differences)


def test_the_meaning_comparison_would_see_a_changed_parameter(tmp_path: Path, configs: Path) -> None:
    """The round trip above is not vacuous: one changed value in the imported YAML is a difference."""
    assert run_import(configs / "deepops", tmp_path / "state", "--slurm-version", "22.05").returncode == 0
    cluster = tmp_path / "state" / "cluster.yaml"
    text = cluster.read_text()
    assert "SlurmdTimeout: 300" in text
    cluster.write_text(text.replace("SlurmdTimeout: 300", "SlurmdTimeout: 301"))
    diff = meaning_diff(configs / "deepops", rendered_dir(tmp_path / "state", tmp_path / "rendered"))
    assert any("slurmdtimeout" in line.lower() for line in diff), diff


def test_comments_of_the_original_are_kept(tmp_path: Path, configs: Path) -> None:
    assert run_import(configs / "openhpc", tmp_path / "state", "--slurm-version", "23.11").returncode == 0
    original = (configs / "openhpc" / "slurm.conf").read_text()
    imported = (tmp_path / "state" / "cluster.yaml").read_text()
    comments = [line.lstrip("# ").strip() for line in original.splitlines()
                if line.startswith("#") and "=" not in line and len(line) > 12]
    kept = [c for c in comments if c in imported]
    assert len(kept) >= len(comments) // 2, (len(kept), len(comments))


def test_a_key_missing_in_the_version_is_an_error_naming_file_and_line(tmp_path: Path, configs: Path) -> None:
    result = run_import(configs / "deepops", tmp_path / "state", "--slurm-version", "23.11")
    assert result.returncode == 1
    assert f"{configs / 'deepops' / 'cgroup.conf'}:1: CgroupAutomount" in result.stderr
    assert "removed in 23.11" in result.stderr and not (tmp_path / "state").exists()


def test_a_config_without_cluster_name_is_refused(tmp_path: Path, configs: Path) -> None:
    result = run_import(configs / "schedmd_manpage_example", tmp_path / "state", "--slurm-version", "22.05")
    assert result.returncode == 1 and "ClusterName" in result.stderr
