"""Slurm configurations written by other people (../shared/fixtures/slurm-realworld) import and round-trip.

Each case imports with the release its SOURCE names (`slurm-version:`; 23.11 when it names none), validates,
and renders back to the same meaning (tests/slurm_meaning.py, independent of the importer and the renderers).
The files stay in ../shared: the tests skip when it is absent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.importer.test_roundtrip import rendered_dir, run_import
from tests.shared_fixtures import shared_cases, shared_fixture
from tests.slurm_meaning import meaning_diff

CORPUS = "slurm-realworld"
DEFAULT_RELEASE = "23.11"


def release_of(case: Path) -> str:
    """The Slurm release family a case's SOURCE names (its files are for that release)."""
    found = re.search(r"^slurm-version:\s*(\d+\.\d+)", (case / "SOURCE").read_text(), re.MULTILINE)
    return found.group(1) if found else DEFAULT_RELEASE


def test_the_corpus_has_its_nine_cases() -> None:
    corpus = shared_fixture(CORPUS)
    cases = shared_cases(CORPUS)
    assert len(cases) == 9, cases
    assert all((corpus / name / "SOURCE").is_file() and (corpus / name / "slurm.conf").is_file() for name in cases)


@pytest.mark.parametrize("name", shared_cases(CORPUS))
def test_real_world_config_imports_and_means_the_same(name: str, tmp_path: Path) -> None:
    case = shared_fixture(CORPUS) / name
    result = run_import(case, tmp_path / "state", "--slurm-version", release_of(case))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "valid" in result.stdout
    rendered = rendered_dir(tmp_path / "state", tmp_path / "rendered")
    differences = [d for d in meaning_diff(case, rendered) if not d.startswith("nodeset:")]
    assert not differences, "\n".join(differences)


def test_a_controller_that_computes_is_one_inventory_entry(tmp_path: Path) -> None:
    case = shared_fixture(CORPUS) / "deic"
    assert run_import(case, tmp_path / "state", "--slurm-version", release_of(case)).returncode == 0
    text = (tmp_path / "state" / "nodes.yaml").read_text()
    assert text.count("- name: linux0") == 1 and "- controller" in text and "- compute" in text, text


def test_a_comment_at_the_end_of_a_line_after_a_commented_out_line_is_kept(tmp_path: Path) -> None:
    case = shared_fixture(CORPUS) / "cfiddle"
    assert run_import(case, tmp_path / "state", "--slurm-version", release_of(case)).returncode == 0
    text = (tmp_path / "state" / "cluster.yaml").read_text()
    assert "# PartitionName=normal Default=yes Nodes=c[1-1000]" in text
    assert re.search(r"- name: normal\s+# Priority=50 DefMemPerCPU=500", text), text
