"""The fallback benchmark: formulas, output format, correctness check, a real 2-process gloo run."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reconciler.checks import allreduce_bench as bench
from reconciler.checks.nccl.parser import parse_file
from reconciler.checks.nccl.table import MODERN_COLUMNS, columns_from, parse_row
from reconciler.checks.nccl.text_output import parse_text
from reconciler.checks.nccl.verdict import Thresholds, evaluate
from tests.checks.nccl.cases import FIXTURES, GIB

REPO = Path(__file__).resolve().parents[3]


def _optional_torch() -> Any:
    """torch, or None where it is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


torch = _optional_torch()
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


@pytest.mark.parametrize(("text", "size"), [("8", 8), ("64K", 65536), ("1M", 1 << 20), ("8G", 8 * GIB)])
def test_parse_size(text: str, size: int) -> None:
    assert bench.parse_size(text) == size


def test_sizes_like_nccl_tests() -> None:
    assert bench.sizes(8, 64, 2, 0) == [8, 16, 32, 64]
    assert bench.sizes(1 << 20, 1 << 30, 4, 0) == [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30]
    assert bench.sizes(100, 350, 1, 100) == [100, 200, 300]


def test_bandwidth_formulas() -> None:
    # all_reduce busbw = algbw * 2 (n - 1) / n; GB = 1e9 bytes
    assert bench.bandwidths(8 * GIB, 0.0247096, 2) == pytest.approx((347.64, 347.64), abs=0.01)
    assert bench.bandwidths(8 * GIB, 0.0409935, 8) == pytest.approx((209.54, 366.70), abs=0.01)
    assert bench.bus_factor(8) == 1.75


def test_row_format_reads_back() -> None:
    oop = bench.Placement(12405.6, 346.21, 346.21, 0)
    ip = bench.Placement(17.5, 0.0, 0.0, None)
    line = bench.fmt_row(4 * GIB, GIB, "float", "sum", oop, ip)
    assert line == (
        "  4294967296    1073741824     float     sum      -1  12405.6  346.21  346.21       0"
        "    17.50    0.00    0.00     N/A"
    )
    columns = columns_from(MODERN_COLUMNS)
    assert columns is not None
    row = parse_row(columns, line)
    assert row is not None
    assert (row.size, row.oop_time_us, row.oop_busbw, row.oop_wrong, row.ip_wrong) == (
        4 * GIB,
        12405.6,
        346.21,
        0,
        None,
    )


def test_header_and_footer_read_back() -> None:
    args = bench.parse_args(["-b", "1M", "-e", "4M", "-f", "4", "-n", "3", "-w", "1"])
    info = {"pid": 42, "host": "node7", "device": "0", "bus": "0000:00:06", "name": "NVIDIA H200"}
    rows = [
        bench.fmt_row(s, s // 4, "float", "sum", *[bench.Placement(10.0, 1.0, 1.0, 0)] * 2)
        for s in (1 << 20, 1 << 22)
    ]
    lines = bench.header_lines(args, 1, "torch 2.x, backend nccl") + [bench.device_line(0, info)]
    lines += bench.table_header() + rows + bench.footer_lines(0, 1.0)
    run = parse_text("\n".join(lines))
    assert run.ok
    (test,) = run.tests
    assert test.tool == "checks.allreduce_bench (torch 2.x, backend nccl)"
    assert test.devices[0].host == "node7" and test.sizes == [1 << 20, 1 << 22]
    assert test.avg_busbw == 1.0 and test.out_of_bounds == 0 and test.concluded


def test_launcher_env() -> None:
    assert bench.launcher_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}) == bench.Launch(3, 8, 3)
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1"}
    assert bench.launcher_env(slurm) is None  # no MASTER_ADDR: cannot rendezvous
    assert bench.launcher_env({**slurm, "MASTER_ADDR": "node1"}) == bench.Launch(5, 16, 1)
    assert bench.launcher_env({}) is None


@needs_torch
def test_pattern_sums_to_expected() -> None:
    world = 3
    total = sum(bench.pattern(50, rank, torch.float32, "cpu") for rank in range(world))
    assert torch.equal(total, bench.expected(50, world, "sum", torch.float32, "cpu"))
    assert bench.expected(8, 4, "max", torch.int32, "cpu").tolist() == [4, 8, 12, 16, 20, 24, 28, 4]


@needs_torch
def test_count_wrong() -> None:
    want = bench.expected(1000, 2, "sum", torch.bfloat16, "cpu")
    got = want.clone()
    got[::100] += 1  # at least 1/21 off: beyond 2 * eps(bfloat16) = 1/64
    assert bench.count_wrong(got, want, world=2, chunk=64) == 10
    near = (want.float() * 1.001).to(torch.bfloat16)  # rounding, not a wrong sum
    assert bench.count_wrong(near, want, world=2) == 0
    ints = bench.expected(1000, 2, "sum", torch.int32, "cpu")
    assert bench.count_wrong(ints + (torch.arange(1000) == 999), ints, world=2) == 1


def _fake_bench(all_reduce: Any, check: int = 1) -> bench.Bench:
    """A rank-0-of-2 Bench whose all-reduce is replaced, on CPU, without a process group."""
    args = argparse.Namespace(check=check, op="sum", iters=1, warmup_iters=0)
    send = bench.pattern(64, 0, torch.float32, "cpu")
    fake = bench.Bench(
        args, bench.Launch(0, 2, 0), False, torch.device("cpu"), torch.float32, None, send, send * 0
    )
    fake.all_reduce = all_reduce  # type: ignore[method-assign]
    return fake


@needs_torch
@pytest.mark.parametrize("in_place", [False, True])
def test_wrong_elements_are_counted(in_place: bool) -> None:
    def correct(t: Any) -> None:
        t.mul_(3)  # rank 0 holds 1x the pattern, the 2-rank sum is 3x

    def broken(t: Any) -> None:
        t.mul_(3)
        t[10:15] = -1

    assert _fake_bench(correct).wrong(64, in_place) == 0
    assert _fake_bench(broken).wrong(64, in_place) == 5
    assert _fake_bench(broken, check=0).wrong(64, in_place) is None


@needs_torch
def test_gloo_two_processes_parsed(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "reconciler.checks.allreduce_bench", "--device", "cpu", "-g", "2"]
    command += ["-b", "1K", "-e", "64K", "-f", "4", "-n", "3", "-w", "1", "--timeout", "120"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    run = parse_text(done.stdout)
    assert run.ok, run.all_errors()
    (test,) = run.tests
    assert test.collective == "all_reduce" and test.tool and test.tool.startswith("checks.allreduce_bench")
    assert test.nranks == 2 and test.sizes == [1024, 4096, 16384, 65536]
    assert [row.count for row in test.rows] == [256, 1024, 4096, 16384]
    assert all(row.oop_wrong == 0 and row.ip_wrong == 0 for row in test.rows)
    assert all(row.oop_busbw == row.oop_algbw for row in test.rows)  # 2 ranks: factor 1
    assert test.out_of_bounds == 0 and test.avg_busbw is not None
    assert evaluate(run, Thresholds(collective="all_reduce", min_busbw=0.0)).passed


def test_h200x2_fallback_next_to_nccl_tests() -> None:
    """The captured GPU run: same sizes as nccl-tests, in-place busbw within 5% from 1 GiB up."""
    fallback = parse_file(FIXTURES / "h200x2_torch_allreduce_bench.txt").tests[0]
    reference = parse_file(FIXTURES / "h200x2_all_reduce_perf.txt").tests[0]
    assert fallback.sizes == reference.sizes
    assert fallback.tool == "checks.allreduce_bench (torch 2.11.0+cu130, backend nccl, NCCL 2.28.9)"
    for mine, theirs in zip(fallback.rows, reference.rows, strict=True):
        assert mine.wrong == 0
        if mine.size >= GIB:
            assert mine.ip_busbw == pytest.approx(theirs.ip_busbw, rel=0.05)
            assert mine.oop_busbw is not None and theirs.oop_busbw is not None
            assert mine.oop_busbw < theirs.oop_busbw  # the copy is timed too
