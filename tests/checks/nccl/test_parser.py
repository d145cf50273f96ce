"""Parser tests: every fixture (real H200 outputs, the fallback benchmark's, hand-made older layouts)."""

from __future__ import annotations

import statistics

import pytest

from reconciler.checks.nccl.binary import collective_from_binary
from reconciler.checks.nccl.json_output import parse_json
from reconciler.checks.nccl.models import NcclRun, NcclTest
from reconciler.checks.nccl.parser import parse_file, parse_output
from reconciler.checks.nccl.text_output import parse_text
from reconciler.checks.nccl.verdict import evaluate
from tests.checks.nccl.cases import CASES, FIXTURES, GIB, Case, TestExpect

IDS = [case.file for case in CASES]


def parsed(case: Case) -> NcclRun:
    """The fixture of a case, parsed."""
    return parse_file(FIXTURES / case.file, exit_code=case.exit_code)


def test_every_fixture_has_a_case() -> None:
    files = {p.name for p in FIXTURES.iterdir() if p.suffix in (".txt", ".json")}
    assert files == {case.file for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_collectives_and_run_errors(case: Case) -> None:
    run = parsed(case)
    assert [t.collective for t in run.tests] == [t.collective for t in case.tests]
    for expected in case.run_errors:
        assert any(expected in err for err in run.errors), (expected, run.errors)
    if not case.run_errors:
        assert run.errors == []


def _pairs(case: Case) -> list[tuple[NcclTest, TestExpect]]:
    """Parsed tests next to what the case expects of them."""
    return list(zip(parsed(case).tests, case.tests, strict=True))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_sizes(case: Case) -> None:
    for test, expect in _pairs(case):
        assert tuple(test.sizes) == expect.sizes
        assert all(row.count > 0 for row in test.rows)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_busbw_per_row(case: Case) -> None:
    for test, expect in _pairs(case):
        by_size = {row.size: row for row in test.rows}
        for size, (oop, ip) in expect.busbw.items():
            assert by_size[size].oop_busbw == pytest.approx(oop, abs=1e-6)
            assert by_size[size].ip_busbw == pytest.approx(ip, abs=1e-6)
        values = [row.busbw() for row in test.rows]
        assert all(value is not None and value >= 0 for value in values)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_wrong_counts(case: Case) -> None:
    for test, expect in _pairs(case):
        assert test.total_wrong == expect.wrong
        assert test.out_of_bounds == expect.out_of_bounds


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_average_and_layout(case: Case) -> None:
    for test, expect in _pairs(case):
        assert test.layout == expect.layout
        if expect.avg is None:
            assert test.avg_busbw is None
            continue
        assert test.avg_busbw == pytest.approx(expect.avg, abs=1e-9)
        # nccl-tests' average is the mean of every row's out-of-place and in-place busbw
        values = [b for row in test.rows for b in (row.oop_busbw, row.ip_busbw) if b is not None]
        assert statistics.fmean(values) == pytest.approx(expect.avg, abs=0.01)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_test_errors(case: Case) -> None:
    for test, expect in _pairs(case):
        for fragment in expect.errors:
            assert any(fragment in err for err in test.errors), (fragment, test.errors)
        if not expect.errors:
            assert test.errors == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_verdict(case: Case) -> None:
    verdict = evaluate(parsed(case), list(case.thresholds))
    assert verdict.passed is case.passed, verdict.reasons
    for fragment in case.reasons:
        assert any(fragment in reason for reason in verdict.reasons), (fragment, verdict.reasons)


# -- layouts and details ----------------------------------------------------------------------------


def test_h200x8_peak_is_8gib() -> None:
    test = parse_file(FIXTURES / "h200x8_all_reduce_perf.txt").tests[0]
    assert test.peak_busbw == pytest.approx(366.89)
    assert test.peak_row is not None and test.peak_row.size == 8 * GIB
    assert test.peak_row.oop_busbw == pytest.approx(366.70)
    assert test.tool == "nccl-tests 2.19.6" and test.nccl_version == 22809
    assert [d.rank for d in test.devices] == list(range(8))
    assert test.devices[7].bus_id == "0000:00:0d" and test.devices[7].name == "NVIDIA H200"
    assert test.concluded


def test_json_and_text_of_one_run_agree() -> None:
    text = parse_file(FIXTURES / "h200x2_all_reduce_perf_json_run.txt").tests[0]
    doc = parse_file(FIXTURES / "h200x2_all_reduce_perf.json").tests[0]
    assert text.sizes == doc.sizes
    for a, b in zip(text.rows, doc.rows, strict=True):
        assert (a.count, a.type, a.redop, a.root) == (b.count, b.type, b.redop, b.root)
        assert a.oop_busbw == pytest.approx(b.oop_busbw, abs=0.005)
        assert a.ip_time_us == pytest.approx(b.ip_time_us, abs=0.005)
    assert text.avg_busbw == pytest.approx(doc.avg_busbw, abs=0.001)


def test_sendrecv_in_place_check_is_na() -> None:
    run = parse_file(FIXTURES / "h200x2_other_perf.txt")
    sendrecv = run.test("sendrecv")
    assert sendrecv is not None
    assert all(row.ip_wrong is None and row.oop_wrong == 0 and row.wrong == 0 for row in sendrecv.rows)
    all_gather = run.test("all_gather")
    assert all_gather is not None and {row.redop for row in all_gather.rows} == {"none"}


def test_pre213_layout_keeps_error_column_apart() -> None:
    test = parse_file(FIXTURES / "handmade_pre213_all_reduce_error_column.txt").tests[0]
    assert test.columns[:4] == ["size", "count", "type", "redop"] and "root" not in test.columns
    row = test.rows[0]
    assert (row.oop_wrong, row.oop_error, row.ip_error, row.root) == (None, 2e-07, 2e-07, None)
    assert test.binary == "all_reduce_perf"  # from the echoed command line
    assert len(test.devices) == 8 and test.devices[0].group is None


def test_pre213_columns_follow_each_collective() -> None:
    gather, bcast, reduce = parse_file(FIXTURES / "handmade_pre213_multi_test.txt").tests
    assert (gather.rows[0].redop, gather.rows[0].root, gather.validation) == (None, None, False)
    assert gather.rows[0].oop_error is None  # N/A with -c 0
    assert (bcast.rows[0].redop, bcast.rows[0].root) == (None, 0)
    assert (reduce.rows[0].redop, reduce.rows[0].root, reduce.rows[0].ip_error) == ("sum", 0, 1e-07)


def test_v213_check_off_reads_na() -> None:
    reduce, gather = parse_file(FIXTURES / "handmade_v213_check_off.txt").tests
    assert reduce.validation is False and gather.validation is True
    assert all(row.oop_wrong is None and row.ip_wrong is None for row in reduce.rows)
    assert reduce.tool is None and reduce.binary == "all_reduce_perf"


def test_current_optional_columns() -> None:
    timed = parse_file(FIXTURES / "handmade_current_cputime_timestamps.txt").tests[0]
    assert timed.time_kind == "cputime"
    assert timed.rows[0].timestamp == "2026-11-21 01:20:00"
    assert timed.rows[-1].oop_time_us == pytest.approx(3274.60)
    per_iter = parse_file(FIXTURES / "handmade_current_per_iteration.txt").tests[0]
    extra = per_iter.rows[-1].extra
    assert extra["oop_i_min"] == pytest.approx(3176.36) and extra["ip_i_cv%"] == pytest.approx(1.8)
    assert per_iter.rows[-1].ip_wrong == 0


def test_json_optional_fields() -> None:
    test = parse_file(FIXTURES / "handmade_json_check_off.json").tests[0]
    assert test.time_kind == "cputime" and test.validation is False
    assert test.rows[0].oop_time_us == pytest.approx(17.164)
    assert test.rows[0].extra["oop_i_p99"] == pytest.approx(18.36548)


def test_debug_lines_glued_to_rows() -> None:
    run = parse_file(FIXTURES / "handmade_debug_split_rows.txt")
    assert run.warnings == ["vm:1602:1615 [1] NCCL WARN NET/IB : No device found."]
    first = run.tests[0].rows[0]
    assert (first.root, first.oop_time_us, first.ip_busbw) == (-1, 17.44, 68.90)


def test_debug_glued_to_both_parts_of_a_row() -> None:
    lines = (FIXTURES / "h200x2_all_reduce_perf_json_run.txt").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith("4194304 "))
    row, glue = lines[index], "vm:1355:1360 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM"
    lines[index : index + 1] = [
        row[:52] + glue,
        glue,
        row[52:85] + "node-2:1355:1361 [1] NCCL WARN x",
        row[85:],
    ]
    run = parse_text("\n".join(lines))
    assert run.ok and run.warnings == ["node-2:1355:1361 [1] NCCL WARN x"]
    assert (
        run.tests[0].rows[1].model_dump()
        == parse_text("\n".join([*lines[:index], row])).tests[0].rows[1].model_dump()
    )


def test_srun_labels_removed() -> None:
    test = parse_file(FIXTURES / "handmade_srun_label_nccl_failure.txt").tests[0]
    assert [d.host for d in test.devices] == ["gpu01", "gpu02"]
    assert test.ngpus == 1


def test_open_mpi_tags_and_recorded_exit_status() -> None:
    text = (FIXTURES / "h200x2_all_reduce_perf_json_run.txt").read_text()
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in text.splitlines()) + "rc=0\n"
    run = parse_text(tagged)
    assert run.ok and run.exit_code == 0
    assert run.tests[0].sizes == parse_text(text).tests[0].sizes


def test_exit_code_argument_wins() -> None:
    text = (FIXTURES / "h200x2_all_reduce_perf_json_run.txt").read_text()
    run = parse_text(text, exit_code=137)
    assert run.errors == ["exit code 137"] and not run.ok


def test_full_row_after_partial_row() -> None:
    lines = (FIXTURES / "h200x2_all_reduce_perf_json_run.txt").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith("4194304 "))
    lines.insert(index, lines[index][:60])
    test = parse_text("\n".join(lines)).tests[0]
    assert test.sizes == [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30]
    assert test.errors == [f"truncated row: {' '.join(lines[index].split())}"]


def test_failure_messages_and_error_comment() -> None:
    text = "\n".join(
        [
            "# Collective test starting: broadcast_perf",
            "# error: NCCL failure: unhandled system error",
            "host: Test timeout (300s) common.cu:371",
        ]
    )
    test = parse_text(text).tests[0]
    assert test.collective == "broadcast"
    assert test.errors == ["NCCL failure: unhandled system error", "host: Test timeout (300s) common.cu:371"]


def test_collective_hint_for_nameless_output() -> None:
    lines = (FIXTURES / "handmade_pre213_all_reduce_error_column.txt").read_text().splitlines()[1:]
    assert parse_text("\n".join(lines)).tests[0].collective == "unknown"
    assert parse_text("\n".join(lines), collective="all_reduce").tests[0].collective == "all_reduce"


def test_empty_and_garbage() -> None:
    assert parse_text("").errors == ["no nccl-tests output found"]
    assert parse_output('{"results": [}').errors[0].startswith("invalid nccl-tests JSON")
    assert parse_json("[1, 2]").errors == ["invalid nccl-tests JSON: top level is not an object"]
    assert parse_json({"args": ["./all_gather_perf"]}).tests[0].errors == ["no result rows"]


@pytest.mark.parametrize(
    ("binary", "collective"),
    [
        ("./build/all_reduce_perf", "all_reduce"),
        ("all_reduce_perf_mpi", "all_reduce"),
        ("/opt/nccl-tests/reduce_scatter_perf", "reduce_scatter"),
        ("alltoall_perf", "alltoall"),
        ("hypercube", "hypercube"),
    ],
)
def test_collective_from_binary(binary: str, collective: str) -> None:
    assert collective_from_binary(binary) == collective
