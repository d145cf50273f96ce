"""`nccl parse FILE [--format text|json]` through click's CliRunner."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from reconciler.cli.nccl import nccl
from tests.checks.nccl.cases import FIXTURES, GIB


def invoke(*args: str) -> tuple[int, str]:
    """Run the group with args; return the exit code and output."""
    result = CliRunner().invoke(nccl, list(args))
    return result.exit_code, result.output


def as_json(name: str) -> tuple[int, dict[str, Any]]:
    """Exit code and JSON document of `nccl parse --format json` on a fixture."""
    code, output = invoke("parse", "--format", "json", str(FIXTURES / name))
    return code, json.loads(output)


def test_json_keys_are_exactly_the_documented_ones() -> None:
    code, doc = as_json("h200x8_all_reduce_perf.txt")
    assert code == 0
    assert set(doc) == {"tests", "errors"} and doc["errors"] == []
    (test,) = doc["tests"]
    assert set(test) == {"collective", "rows", "out_of_bounds", "avg_busbw"}
    assert all(set(row) == {"size", "oop_busbw", "ip_busbw", "wrong"} for row in test["rows"])
    assert test["collective"] == "all_reduce" and test["out_of_bounds"] == 0 and test["avg_busbw"] == 121.06
    assert test["rows"][-1] == {"size": 8 * GIB, "oop_busbw": 366.7, "ip_busbw": 366.89, "wrong": 0}
    assert len(test["rows"]) == 31


def test_json_of_several_tests_and_unchecked_rows() -> None:
    code, doc = as_json("h200x2_other_perf.txt")
    assert code == 0
    assert [t["collective"] for t in doc["tests"]] == ["all_gather", "reduce_scatter", "sendrecv", "alltoall"]
    assert doc["tests"][2]["rows"][0]["wrong"] == 0  # out-of-place 0, in-place N/A
    code, doc = as_json("handmade_json_check_off.json")
    assert code == 0 and {row["wrong"] for row in doc["tests"][0]["rows"]} == {None}


def test_json_errors_and_exit_code_one() -> None:
    code, doc = as_json("h200x2_debug_and_errors.txt")
    assert code == 1
    assert doc["errors"] == [
        "exit code 5",
        "all_reduce: Invalid number of GPUs: 3 requested but only 2 were found.",
        "all_reduce: vm pid 1486: Test failure common.cu:1454",
    ]
    assert doc["tests"][1]["rows"] == [] and doc["tests"][1]["avg_busbw"] is None


def test_text_format() -> None:
    code, output = invoke("parse", str(FIXTURES / "h200x8_all_reduce_perf.txt"))
    assert code == 0
    lines = output.splitlines()
    assert lines[0] == "all_reduce (all_reduce_perf, nccl-tests 2.19.6, 8 ranks, layout 2.13+)"
    assert "       8 GiB   8589934592     366.70     366.89       0" in lines
    assert "  out of bounds values: 0" in lines and "  avg bus bandwidth: 121.06 GB/s" in lines
    assert lines[-1] == "errors: none"


def test_text_format_shows_errors_and_na() -> None:
    code, output = invoke("parse", "--format", "text", str(FIXTURES / "handmade_truncated.txt"))
    assert code == 1
    assert "  out of bounds values: N/A" in output and "  avg bus bandwidth: N/A" in output
    assert "truncated output: no footer after 20 rows (last size 4194304)" in output


def test_missing_file_is_a_usage_error() -> None:
    code, output = invoke("parse", str(FIXTURES / "no_such_file.txt"))
    assert code == 2 and "does not exist" in output
