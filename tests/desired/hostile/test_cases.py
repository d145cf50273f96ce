"""Every hostile case of tests/desired/hostile/cases/ is refused by the loader with file:line:col and its message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconciler.desired.loader import DesiredStateError, load_dir
from tests.desired.hostile.cases import Case, load_cases, write_case

CASES = load_cases()
WHERE = re.compile(r"^[\w./-]+\.ya?ml:\d+:\d+: ")


def test_there_are_at_least_25_classes() -> None:
    assert len(CASES) >= 25


def test_the_base_state_is_valid(tmp_path: Path) -> None:
    """The cases fail because of what they add, not because the base is broken."""
    base = Case("base", "no change", "", None, None, None)
    load_dir(write_case(base, tmp_path, state_dir=tmp_path / "tb", subnet="10.9.8"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_is_refused_with_file_line_column(case: Case, tmp_path: Path) -> None:
    directory = write_case(case, tmp_path / "state", state_dir=tmp_path / "tb", subnet="10.9.8")
    with pytest.raises(DesiredStateError) as caught:
        load_dir(directory)
    errors = caught.value.errors
    matching = [e for e in errors if case.expect in e.message]
    assert matching, f"{case.name}: no error says {case.expect!r}: {[str(e) for e in errors]}"
    for error in matching:
        assert WHERE.match(str(error)), f"{case.name}: no file:line:col in {error}"
        if case.at is not None:
            assert error.key_path().startswith(case.at), f"{case.name}: {error.key_path()} is not under {case.at}"
