"""The bundled desired states render byte for byte what they rendered before issue 12 (render only what is set)."""

from __future__ import annotations

import json

import pytest

from tests.render.golden import GOLDEN, current


@pytest.mark.parametrize("name", ["desired-state", "testbed"])
def test_renders_are_byte_identical_to_the_golden_files(name: str) -> None:
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    now = current()[name]
    assert sorted(now) == sorted(golden)
    for key, text in golden.items():
        assert now[key] == text, f"{name}: {key} changed"
