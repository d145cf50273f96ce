"""Test data that lives beside the project, in `../shared/fixtures/`, never in it (third-party files).

`shared_fixture("slurm-thirdparty")` is the folder when it is there; when it is absent (a user's clone without
`../shared`) the calling test is skipped with the reason, never failed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shared_root() -> Path:
    """`../shared/fixtures` beside the project root (RECONCILER_SHARED_FIXTURES overrides it)."""
    override = os.environ.get("RECONCILER_SHARED_FIXTURES")
    return Path(override) if override else ROOT.parent / "shared" / "fixtures"


def shared_path(name: str) -> Path:
    """Where the shared fixture folder `name` is (whether or not it exists)."""
    return shared_root() / name


def absent_reason(path: Path) -> str:
    """Why a test that needs PATH is skipped."""
    return (f"{path} is absent: these tests read third-party Slurm files from ../shared/fixtures "
            "beside the project root (see README, 'Run the tests')")


def shared_fixture(name: str) -> Path:
    """The shared fixture folder `name`; skips the calling test when it is absent."""
    path = shared_path(name)
    if not path.is_dir():
        pytest.skip(absent_reason(path))
    return path


def shared_cases(name: str) -> list[str] | list[object]:
    """The case folders of a shared fixture, for parametrize; when it is absent, one case skipped with the reason."""
    path = shared_path(name)
    if not path.is_dir():
        return [pytest.param("absent", marks=pytest.mark.skip(reason=absent_reason(path)))]
    return sorted(p.name for p in path.iterdir() if p.is_dir())
