"""Data-driven fact parser tests: tests/facts/<fact>/<case>.json holds command output -> expected fact."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.facts import parsers

HERE = Path(__file__).parent


def _dump(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value.model_dump() if hasattr(value, "model_dump") else value


PARSERS: dict[str, Callable[[str], Any]] = {
    "scontrol_nodes": parsers.parse_scontrol_nodes,
    "squeue": parsers.parse_squeue,
    "proc_mounts": parsers.parse_proc_mounts,
    "mountinfo": parsers.parse_mountinfo,
    "slurm_version": parsers.parse_slurm_version,
    "supervisorctl_status": parsers.parse_supervisorctl_status,
}

CASES = sorted((p.parent.name, p) for p in HERE.glob("*/*.json"))


@pytest.mark.parametrize(("fact", "path"), CASES, ids=[f"{f}/{p.stem}" for f, p in CASES])
def test_fact_case(fact: str, path: Path) -> None:
    case = json.loads(path.read_text())
    assert _dump(PARSERS[fact](case["output"])) == case["fact"]


def test_every_parser_has_cases() -> None:
    assert {fact for fact, _ in CASES} == set(PARSERS)


def test_drained_and_responding_flags() -> None:
    case = json.loads((HERE / "scontrol_nodes/idle_and_drained.json").read_text())
    nodes = parsers.parse_scontrol_nodes(case["output"])
    assert not nodes["gpu01"].drained and nodes["gpu01"].responding
    assert nodes["gpu02"].drained and nodes["gpu02"].responding
    assert nodes["gpu03"].drained and not nodes["gpu03"].responding
