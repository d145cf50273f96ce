"""What each fixture in tests/fixtures/nccl holds, read off the files by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reconciler.checks.nccl.verdict import Thresholds

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures" / "nccl"
GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class TestExpect:
    """One test of a fixture."""

    __test__ = False  # not a pytest class

    collective: str
    sizes: tuple[int, ...] | None
    busbw: dict[int, tuple[float, float]] = field(default_factory=dict)  # size -> (oop, ip)
    wrong: int | None = 0
    avg: float | None = None
    out_of_bounds: int | None = 0
    layout: str = "2.13+"
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    """One fixture file, its tests, run-level errors and the verdict under some thresholds."""

    file: str
    tests: tuple[TestExpect, ...]
    run_errors: tuple[str, ...] = ()
    thresholds: tuple[Thresholds, ...] = ()
    passed: bool = True
    reasons: tuple[str, ...] = ()
    exit_code: int | None = None


def doubling(first: int, last: int, factor: int = 2) -> tuple[int, ...]:
    """first, first*factor, ... up to last."""
    found = [first]
    while found[-1] < last:
        found.append(found[-1] * factor)
    return tuple(found)


AR_8X = Thresholds(collective="all_reduce", min_busbw=330, min_size=GIB)
AR_2X = Thresholds(collective="all_reduce", min_busbw=320, min_size=GIB)

CASES = [
    Case(
        "h200x8_all_reduce_perf.txt",
        (
            TestExpect(
                "all_reduce",
                doubling(8, 8 * GIB),
                {8 * GIB: (366.70, 366.89), GIB: (359.50, 359.27), 8: (0.00, 0.00), 2048: (0.03, 0.07)},
                avg=121.06,
            ),
        ),
        thresholds=(AR_8X, Thresholds(collective="all_reduce", min_avg_busbw=100)),
    ),
    Case(
        "h200x2_all_reduce_perf.txt",
        (
            TestExpect(
                "all_reduce",
                doubling(8, 8 * GIB),
                {8 * GIB: (347.64, 346.64), GIB: (328.46, 327.45), 16384: (1.27, 1.00)},
                avg=111.258,
            ),
        ),
        thresholds=(AR_2X,),
    ),
    Case(
        "h200x2_all_reduce_perf.json",
        (
            TestExpect(
                "all_reduce",
                doubling(MIB, GIB, 4),
                {GIB: (328.156362, 330.499137), MIB: (61.091587, 69.852677)},
                avg=216.481648,
                layout="json",
            ),
        ),
        thresholds=(AR_2X,),
    ),
    Case(
        "h200x2_all_reduce_perf_json_run.txt",
        (TestExpect("all_reduce", doubling(MIB, GIB, 4), {GIB: (328.16, 330.50)}, avg=216.482),),
        thresholds=(AR_2X,),
    ),
    Case(
        "h200x2_other_perf.txt",
        (
            TestExpect("all_gather", doubling(MIB, GIB, 4), {GIB: (271.97, 292.09)}, avg=170.701),
            TestExpect("reduce_scatter", doubling(MIB, GIB, 4), {GIB: (272.15, 276.33)}, avg=165.833),
            TestExpect("sendrecv", doubling(MIB, 256 * MIB, 4), {256 * MIB: (302.40, 304.12)}, avg=189.422),
            TestExpect("alltoall", doubling(MIB, 256 * MIB, 4), {256 * MIB: (284.18, 288.42)}, avg=163.161),
        ),
        thresholds=(Thresholds(min_busbw=200, min_size=64 * MIB),),
    ),
    Case(
        "h200x2_debug_and_errors.txt",
        (
            TestExpect("all_reduce", doubling(MIB, 64 * MIB, 4), {64 * MIB: (270.03, 269.15)}, avg=167.568),
            TestExpect(
                "all_reduce",
                (),
                wrong=None,
                out_of_bounds=None,
                layout="unknown",
                errors=(
                    "Invalid number of GPUs: 3 requested but only 2 were found.",
                    "Test failure common.cu:1454",
                ),
            ),
        ),
        run_errors=("exit code 5",),
        thresholds=(AR_2X,),
        passed=False,
        reasons=("nccl exit code 5", "nccl all_reduce: Invalid number of GPUs", "no rows at or above 1 GiB"),
    ),
    Case(
        "h200x2_torch_allreduce_bench.txt",
        (
            TestExpect(
                "all_reduce",
                doubling(8, 8 * GIB),
                {8 * GIB: (299.56, 348.90), GIB: (285.13, 328.80), 8: (0.00, 0.00)},
                avg=103.675,
            ),
        ),
        thresholds=(Thresholds(collective="all_reduce", min_busbw=320, min_size=GIB, placement="ip"),),
    ),
    Case(
        "h200x2_torch_allreduce_bench_torchrun_bf16.txt",
        (TestExpect("all_reduce", doubling(MIB, GIB, 4), {GIB: (286.62, 330.38)}, avg=189.516),),
        thresholds=(Thresholds(collective="all_reduce", min_busbw=320, min_size=GIB, placement="ip"),),
    ),
    Case(
        "h200x2_torch_allreduce_bench_nccl_debug.txt",
        (TestExpect("all_reduce", doubling(MIB, 64 * MIB, 4), {64 * MIB: (237.54, 264.54)}, avg=146.414),),
        thresholds=(Thresholds(collective="all_reduce", min_busbw=180, min_size=16 * MIB),),
    ),
    Case(
        "handmade_current_cputime_timestamps.txt",
        (TestExpect("all_reduce", doubling(MIB, GIB, 4), {GIB: (327.90, 330.21)}, avg=215.847),),
        thresholds=(AR_2X,),
    ),
    Case(
        "handmade_current_per_iteration.txt",
        (TestExpect("all_reduce", doubling(MIB, GIB, 4), {GIB: (327.90, 330.21)}, avg=215.847),),
        thresholds=(AR_2X,),
    ),
    Case(
        "handmade_debug_split_rows.txt",
        (
            TestExpect(
                "all_reduce",
                doubling(MIB, 64 * MIB, 4),
                {MIB: (60.12, 68.90), 16 * MIB: (211.95, 218.10)},
                avg=166.491,
            ),
        ),
    ),
    Case(
        "handmade_h200x8_degraded_all_reduce.txt",
        (
            TestExpect(
                "all_reduce",
                doubling(8, 8 * GIB),
                {8 * GIB: (121.01, 121.07), GIB: (118.64, 118.56)},
                avg=39.9498,
            ),
        ),
        thresholds=(AR_8X,),
        passed=False,
        reasons=("nccl all_reduce busbw 118.6 < 330 GB/s",),
    ),
    Case(
        "handmade_json_check_off.json",
        (
            TestExpect(
                "all_reduce",
                doubling(MIB, 16 * MIB, 4),
                {16 * MIB: (212.660953, 218.933248)},
                wrong=None,
                avg=133.398459,
                layout="json",
            ),
        ),
        thresholds=(Thresholds(collective="all_reduce", min_avg_busbw=150),),
        passed=False,
        reasons=("nccl all_reduce avg busbw 133.4 < 150 GB/s",),
    ),
    Case(
        "handmade_json_truncated.json",
        (),
        run_errors=("invalid nccl-tests JSON",),
        thresholds=(AR_2X,),
        passed=False,
        reasons=("nccl invalid nccl-tests JSON", "nccl all_reduce: no results"),
    ),
    Case(
        "handmade_pre213_all_reduce_error_column.txt",
        (
            TestExpect(
                "all_reduce",
                doubling(MIB, GIB, 4),
                {GIB: (229.85, 230.12), MIB: (24.51, 24.87)},
                wrong=None,
                avg=149.879,
                layout="pre-2.13",
            ),
        ),
        thresholds=(Thresholds(collective="all_reduce", min_busbw=220, min_size=256 * MIB),),
    ),
    Case(
        "handmade_pre213_multi_test.txt",
        tuple(
            TestExpect(
                name, doubling(MIB, 64 * MIB, 4), {64 * MIB: bw}, wrong=None, avg=avg, layout="pre-2.13"
            )
            for name, bw, avg in (
                ("all_gather", (43.51, 43.60), 33.5613),
                ("broadcast", (44.48, 44.52), 39.165),
                ("reduce", (44.20, 44.31), 38.66),
            )
        ),
        thresholds=(Thresholds(min_busbw=40, min_size=16 * MIB),),
    ),
    Case(
        "handmade_srun_label_nccl_failure.txt",
        (
            TestExpect(
                "all_reduce",
                doubling(MIB, 64 * MIB, 4),
                {64 * MIB: (23.88, 23.90)},
                avg=None,
                out_of_bounds=None,
                errors=(
                    "gpu02 pid 5121: Test NCCL failure common.cu:1123",
                    "srun: error: gpu02: task 1: Exited with exit code 3",
                    "truncated output: no footer after 4 rows (last size 67108864)",
                ),
            ),
        ),
        run_errors=("exit code 3",),
        exit_code=3,
        thresholds=(AR_2X,),
        passed=False,
        reasons=("nccl all_reduce: truncated output", "nccl exit code 3", "no rows at or above 1 GiB"),
    ),
    Case(
        "handmade_truncated.txt",
        (
            TestExpect(
                "all_reduce",
                doubling(8, 4 * MIB),
                {4 * MIB: (114.20, 110.12)},
                avg=None,
                out_of_bounds=None,
                errors=(
                    "truncated row: 8388608 2097152 float sum -1 79.40 105.64",
                    "truncated output: no footer after 20 rows (last size 4194304)",
                ),
            ),
        ),
        thresholds=(Thresholds(collective="all_reduce", min_busbw=100, min_size=4 * MIB),),
        passed=False,
        reasons=("nccl all_reduce: truncated row",),
    ),
    Case(
        "handmade_v213_check_off.txt",
        (
            TestExpect(
                "all_reduce",
                (8, 128, 2048, 32768, 524288, 8 * MIB, 128 * MIB),
                {128 * MIB: (362.43, 363.10)},
                wrong=None,
                avg=72.9586,
            ),
            TestExpect(
                "all_gather",
                (256, 2048, 32768, 524288, 8 * MIB, 128 * MIB),
                {128 * MIB: (322.70, 330.04)},
                avg=73.5258,
            ),
        ),
        thresholds=(Thresholds(min_busbw=300, min_size=128 * MIB),),
    ),
    Case(
        "handmade_wrong_values.txt",
        (
            TestExpect(
                "all_reduce", doubling(MIB, 64 * MIB, 4), {16 * MIB: (211.95, 218.10)}, 1061, 166.491, 2
            ),
        ),
        thresholds=(Thresholds(collective="all_reduce"),),
        passed=False,
        reasons=(
            "nccl all_reduce 1061 wrong elements (first at 16 MiB)",
            "nccl all_reduce 2 out-of-bounds values",
        ),
    ),
]
