"""NCCL check cost: GPU-seconds to a verdict, the check's defaults against the full 8 B..8 GiB sweep.

Reads real nccl-tests runs recorded on a GPU machine through the check's own local launcher
(tests/fixtures/nccl/device/, recorded by bench/nccl_device.sh, imported by `python -m bench.nccl_device`),
so the table is reproducible without GPUs. Each fixture is the launcher's batch output: it is split by
`checks.nccl.run.parse_batch` (the output and the wall time the batch measured around the process), parsed by
`checks.nccl.parser` and judged by `checks.nccl.verdict.evaluate`. GPU-seconds = GPUs x that wall time
(nvidia-smi guard, process start, CUDA and NCCL set-up, warm-up, timed iterations, validation, output).
A setting meets the issue's target when its median GPU-seconds are at most a quarter of the same recording's full
sweep and its verdict bus bandwidth (what the check records: mean over rows >= 1 GiB, lower of out-of-place and
in-place) is within 5 % of the full sweep's peak (best row, lower of the two placements; median over runs).
Also shown: the collective time of the recorded 8x H200 full sweep (rows only) against its rows the defaults keep.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from bench.common import REPO, median
from reconciler.checks.nccl.models import NcclRow, NcclTest
from reconciler.checks.nccl.parser import parse_output
from reconciler.checks.nccl.run import parse_batch
from reconciler.checks.nccl.text_output import parse_text
from reconciler.checks.nccl.verdict import Thresholds, evaluate, representative_busbw, row_busbw
from reconciler.model import NcclCheck

FIXTURES = REPO / "tests" / "fixtures" / "nccl" / "device"
EIGHT_GPU = REPO / "tests" / "fixtures" / "nccl" / "h200x8_all_reduce_perf.txt"
GIB = 1 << 30
FULL = "full"
MAX_SHARE = 0.25  # the target: a verdict costs at most a quarter of the full sweep's GPU-seconds
MAX_DROP_PCT = 5.0  # ... and its bus bandwidth stays within 5 % of the sweep's peak
# For the verdict column: every row from 1 GiB up, the lower of out-of-place and in-place, at or above 300 GB/s.
VERDICT = Thresholds(collective="all_reduce", min_busbw=300.0, min_size=GIB)
ITERS = re.compile(r"warmup iters: (\d+) iters: (\d+)")
GPU_OPTIONS = ("-g", "--ngpus")


def check_default_args() -> str:
    """The check's default nccl-tests arguments without -g (the launcher sets the GPUs)."""
    args = NcclCheck(name="x", nodes="n").args
    kept = [a for i, a in enumerate(args) if a not in GPU_OPTIONS and (i == 0 or args[i - 1] not in GPU_OPTIONS)]
    return " ".join(kept)


def collective_seconds(text: str, rows: list[NcclRow]) -> float:
    """Seconds spent in the timed collectives: (warm-up + iterations) x (out-of-place + in-place) per row."""
    match = ITERS.search(text)
    warmup, iters = (int(match.group(1)), int(match.group(2))) if match else (0, 20)
    return sum((warmup + iters) * ((r.oop_time_us or 0.0) + (r.ip_time_us or 0.0)) for r in rows) / 1e6


def peak_busbw(test: NcclTest) -> float:
    """The best row's bus bandwidth (lower of out-of-place and in-place)."""
    return max((b for row in test.rows if (b := row_busbw(row)) is not None), default=0.0)


def _measure(fixtures: Path, item: dict[str, Any], gpus: int) -> dict[str, Any]:
    """One recorded run: wall time, GPU-seconds, busbw figures and the verdict."""
    step = parse_batch((fixtures / item["file"]).read_text(), 1)[0]
    run = parse_output(step.output, exit_code=step.rc, collective="all_reduce")
    test = run.test("all_reduce")
    verdict = evaluate(run, VERDICT)
    return {"wall_s": step.seconds, "gpu_s": gpus * step.seconds, "sizes": len(test.rows) if test else 0,
            "collective_s": collective_seconds(step.output, test.rows) if test else 0.0,
            "busbw": (representative_busbw(test, GIB) or 0.0) if test else 0.0,
            "peak": peak_busbw(test) if test else 0.0, "validation": bool(test and test.validation),
            "verdict": "pass" if verdict.passed else f"FAIL: {verdict.reason}"}


def recorded(fixtures: Path = FIXTURES) -> list[dict[str, Any]]:
    """One row per setting of each recording (every *_runs.json): medians over its runs, against its full sweep."""
    default = check_default_args()
    rows: list[dict[str, Any]] = []
    for meta_path in sorted(fixtures.glob("*_runs.json")):
        meta = json.loads(meta_path.read_text())
        mine: list[dict[str, Any]] = []
        for name, config in meta["configs"].items():
            measured = [_measure(fixtures, r, config["gpus"]) for r in meta["runs"] if r["config"] == name]
            if not measured:
                continue
            mine.append({
                "source": f"{meta_path.name.removesuffix('_runs.json')} (recorded {meta['recorded'][:10]})",
                "device": meta["device"], "config": name, "args": config["args"], "gpus": config["gpus"],
                "check_default": config["args"] == default, "runs": len(measured),
                "sizes": measured[0]["sizes"], "validation": measured[0]["validation"],
                "wall_s": median([m["wall_s"] for m in measured]),
                "wall_runs_s": [round(m["wall_s"], 2) for m in measured],
                "gpu_s": median([m["gpu_s"] for m in measured]),
                "collective_gpu_s": config["gpus"] * median([m["collective_s"] for m in measured]),
                "busbw": median([m["busbw"] for m in measured]),
                "peak": median([m["peak"] for m in measured]),
                "verdicts": sorted({m["verdict"] for m in measured}),
            })
        full = next((r for r in mine if r["config"] == FULL), None)
        for row in mine:
            if full and full["gpu_s"] and full["peak"]:
                row["share"] = row["gpu_s"] / full["gpu_s"]
                row["busbw_vs_peak_pct"] = (row["busbw"] / full["peak"] - 1.0) * 100.0
                row["meets"] = row["share"] <= MAX_SHARE and row["busbw_vs_peak_pct"] >= -MAX_DROP_PCT
        rows += mine
    return rows


def eight_gpu_model(path: Path = EIGHT_GPU) -> list[dict[str, Any]]:
    """The recorded 8x H200 full sweep: GPU-seconds in the collectives of all rows vs the rows >= 1 GiB."""
    text = path.read_text()
    test = parse_text(text).test("all_reduce")
    if test is None:
        return []
    gpus = len(test.devices) or 8
    out = []
    for sweep, rows in (("full", test.rows), ("rows >= 1 GiB", [r for r in test.rows if r.size >= GIB])):
        seconds = collective_seconds(text, rows)
        out.append({"source": f"{path.name} (nccl-tests 2.19.6, 8x H200, rows only)", "sweep": sweep,
                    "gpus": gpus, "sizes": len(rows), "collective_s": seconds, "collective_gpu_s": gpus * seconds,
                    "peak": max((b for r in rows if (b := row_busbw(r)) is not None), default=0.0)})
    return out


def run() -> dict[str, Any]:
    """The section's data: measured rows, the check default's share of the full sweep per recording, the model."""
    measured = recorded()
    defaults = [r for r in measured if r["check_default"] and "share" in r]
    return {"measured": measured, "default_args": check_default_args(),
            "default_shares": [r["share"] for r in defaults],
            "default_busbw_vs_peak_pct": [r["busbw_vs_peak_pct"] for r in defaults],
            "default_meets": bool(defaults) and all(r["meets"] for r in defaults),
            "default_share_mean": statistics.fmean([r["share"] for r in defaults]) if defaults else None,
            "eight_gpu_model": eight_gpu_model()}
