"""Verdict tests: thresholds on the real H200 figures, the drain-reason wording, regressions."""

from __future__ import annotations

import pytest

from reconciler.checks.nccl.parser import parse_file
from reconciler.checks.nccl.verdict import (
    RegressionPolicy,
    Thresholds,
    check_regression,
    evaluate,
    format_size,
    representative_busbw,
)
from tests.checks.nccl.cases import FIXTURES, GIB, MIB

H200X8 = parse_file(FIXTURES / "h200x8_all_reduce_perf.txt")
H200X2 = parse_file(FIXTURES / "h200x2_all_reduce_perf.txt")
DEGRADED = parse_file(FIXTURES / "handmade_h200x8_degraded_all_reduce.txt")
LIMIT_8X = Thresholds(collective="all_reduce", min_busbw=330, min_size=GIB)


def test_healthy_8x_passes_the_issue_threshold() -> None:
    verdict = evaluate(H200X8, LIMIT_8X)
    assert verdict.passed and verdict.reason is None


def test_degraded_8x_fails_with_a_drain_reason() -> None:
    verdict = evaluate(DEGRADED, LIMIT_8X)
    assert not verdict.passed
    assert verdict.reason == "nccl all_reduce busbw 118.6 < 330 GB/s"
    finding = verdict.findings[0]
    assert (finding.kind, finding.size, finding.value, finding.limit) == ("busbw", GIB, 118.56, 330)


def test_the_lowest_row_at_or_above_the_size_decides() -> None:
    # 2x H200: 327.45 GB/s in-place at 1 GiB is the lowest figure from 1 GiB up
    verdict = evaluate(H200X2, LIMIT_8X)
    assert verdict.reasons == ["nccl all_reduce busbw 327.4 < 330 GB/s"]
    assert verdict.findings[0].size == GIB
    assert evaluate(H200X2, LIMIT_8X.model_copy(update={"min_size": 2 * GIB})).passed


@pytest.mark.parametrize(("placement", "value"), [("oop", 328.46), ("ip", 327.45), ("both", 327.45)])
def test_placement_choice(placement: str, value: float) -> None:
    limits = Thresholds(collective="all_reduce", min_busbw=400, min_size=GIB, placement=placement)  # type: ignore[arg-type]
    assert evaluate(H200X2, limits).findings[0].value == value


def test_average_threshold() -> None:
    assert evaluate(H200X8, Thresholds(min_avg_busbw=121)).passed
    verdict = evaluate(H200X8, Thresholds(min_avg_busbw=125))
    assert verdict.reasons == ["nccl all_reduce avg busbw 121.1 < 125 GB/s"]


def test_wrong_values_tolerance() -> None:
    run = parse_file(FIXTURES / "handmade_wrong_values.txt")
    assert run.ok  # wrong values are results, not parse errors
    assert evaluate(run, Thresholds(max_wrong=2000, max_out_of_bounds=2)).passed
    verdict = evaluate(run, Thresholds(max_wrong=2000))
    assert [f.kind for f in verdict.findings] == ["out_of_bounds"]


def test_missing_collective_and_missing_sizes() -> None:
    assert evaluate(H200X8, Thresholds(collective="all_gather", min_busbw=1)).reasons == [
        "nccl all_gather: no results"
    ]
    verdict = evaluate(H200X8, Thresholds(min_busbw=1, min_size=16 * GIB))
    assert verdict.reasons == ["nccl all_reduce: no rows at or above 16 GiB"]


def test_several_thresholds_per_collective() -> None:
    run = parse_file(FIXTURES / "h200x2_other_perf.txt")
    verdict = evaluate(
        run,
        [
            Thresholds(collective="all_gather", min_busbw=280, min_size=GIB),
            Thresholds(collective="sendrecv", min_busbw=300, min_size=256 * MIB),
        ],
    )
    assert verdict.reasons == ["nccl all_gather busbw 272.0 < 280 GB/s"]


def test_regression_against_recent_median() -> None:
    history = [350.0, 348.0, 20.0, 352.0, 349.0, 351.0]  # one old outlier outside the window of 5
    result = check_regression(300.0, history, RegressionPolicy(max_drop_pct=10, window=5), "all_reduce busbw")
    assert result.regressed and result.median == 349.0 and result.history_used == 5
    assert result.drop_pct == pytest.approx(14.04, abs=0.01)
    assert result.reason == (
        "nccl all_reduce busbw 300.0 GB/s is 14.0% below its median 349.0 GB/s of the last 5 runs"
    )
    assert not check_regression(320.0, history, RegressionPolicy(max_drop_pct=10, window=5)).regressed


def test_regression_needs_history() -> None:
    result = check_regression(10.0, [350.0, 351.0], RegressionPolicy(min_history=3))
    assert not result.regressed and result.median is None and result.history_used == 2


def test_regression_in_evaluate_on_a_healthy_looking_node() -> None:
    current = representative_busbw(H200X2.tests[0], min_size=GIB)
    assert current == pytest.approx((327.45 + 338.56 + 345.22 + 346.64) / 4)
    limits = Thresholds(collective="all_reduce", min_busbw=300, min_size=GIB)
    assert evaluate(H200X2, limits, history={"all_reduce": [339.0, 340.0, 341.0]}).passed
    verdict = evaluate(H200X2, limits, history={"all_reduce": [400.0, 401.0, 399.0]})
    assert [f.kind for f in verdict.findings] == ["regression"]
    assert verdict.reasons[0].startswith("nccl all_reduce busbw 339.5 GB/s is 15.1% below its median 400.0")


def test_parse_errors_fail_the_verdict() -> None:
    run = parse_file(FIXTURES / "h200x2_debug_and_errors.txt")
    verdict = evaluate(run, [])
    assert verdict.reasons == [
        "nccl exit code 5",
        "nccl all_reduce: Invalid number of GPUs: 3 requested but only 2 were found.",
        "nccl all_reduce: vm pid 1486: Test failure common.cu:1454",
    ]


@pytest.mark.parametrize(
    ("size", "text"), [(8, "8 B"), (65536, "64 KiB"), (GIB, "1 GiB"), (3 * MIB // 2, "1.5 MiB")]
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text
