"""NCCL check cost: GPU-seconds to reach a verdict, full 8 B..8 GiB sweep vs the check's default sizes.

Reads recorded runs (tests/fixtures/nccl/bench/, recorded by bench/nccl_record.sh on a GPU machine), so the
table is reproducible without GPUs: each output is parsed by `checks.nccl.parser` and judged by
`checks.nccl.verdict.evaluate`; GPU-seconds = GPUs x the wall time recorded around the process (start-up,
NCCL set-up, the sweep with its warm-up and validation, output). Also shown: the time the collectives
themselves took, from the rows ((warm-up + iterations) x (out-of-place + in-place time)), which is what
start-up does not blur, and the same for the recorded 8x H200 nccl-tests run
(tests/fixtures/nccl/h200x8_all_reduce_perf.txt, a full sweep: its default-size rows are a subset).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bench.common import REPO, median
from checks.nccl.models import NcclRow, NcclRun
from checks.nccl.parser import parse_text
from checks.nccl.verdict import Thresholds, evaluate

FIXTURES = REPO / "tests" / "fixtures" / "nccl" / "bench"
EIGHT_GPU = REPO / "tests" / "fixtures" / "nccl" / "h200x8_all_reduce_perf.txt"
GIB = 1 << 30
DEFAULT_MIN = GIB  # the check's default args: -b 1G -e 8G -f 2
# For the verdict column: every row from 1 GiB up, out-of-place and in-place, at or above this bus bandwidth.
VERDICT = Thresholds(collective="all_reduce", min_busbw=300.0, min_size=GIB)
ITERS = re.compile(r"warmup iters: (\d+) iters: (\d+)")


def collective_seconds(text: str, rows: list[NcclRow]) -> float:
    """Seconds spent in the timed collectives: (warm-up + iterations) x (out-of-place + in-place) per row."""
    match = ITERS.search(text)
    warmup, iters = (int(match.group(1)), int(match.group(2))) if match else (0, 20)
    return sum((warmup + iters) * ((r.oop_time_us or 0.0) + (r.ip_time_us or 0.0)) for r in rows) / 1e6


def _busbw_at(run: NcclRun, size: int) -> float | None:
    test = run.test("all_reduce")
    row = next((r for r in test.rows if r.size == size), None) if test else None
    return row.ip_busbw if row else None


def recorded(fixtures: Path = FIXTURES) -> list[dict[str, Any]]:
    """One row per sweep of the recorded runs (every *_runs.json), medians over its runs."""
    rows = []
    for meta_path in sorted(fixtures.glob("*_runs.json")):
        meta = json.loads(meta_path.read_text())
        for sweep in ("full", "default"):
            runs = [r for r in meta["runs"] if r["sweep"] == sweep]
            if not runs:
                continue
            walls, gpu_s, coll, busbw, verdicts, sizes = [], [], [], [], [], []
            for item in runs:
                text = (fixtures / item["file"]).read_text()
                run = parse_text(text, exit_code=item["rc"])
                test = run.test("all_reduce")
                test_rows = test.rows if test else []
                verdict = evaluate(run, VERDICT)
                walls.append(item["wall_s"])
                gpu_s.append(item["gpus"] * item["wall_s"])
                coll.append(collective_seconds(text, test_rows))
                busbw.append(_busbw_at(run, 8 * GIB) or 0.0)
                verdicts.append("pass" if verdict.passed else f"FAIL: {verdict.reason}")
                sizes.append(len(test_rows))
            rows.append({
                "source": f"{meta_path.name.removesuffix('_runs.json')} (recorded {meta['recorded'][:10]})",
                "device": meta["device"],
                "sweep": sweep,
                "args": runs[0]["command"].split("allreduce_bench", 1)[-1].strip(),
                "gpus": runs[0]["gpus"],
                "sizes": sizes[0],
                "runs": len(runs),
                "wall_s": median(walls),
                "wall_runs_s": walls,
                "gpu_s": median(gpu_s),
                "collective_s": median(coll),
                "collective_gpu_s": runs[0]["gpus"] * median(coll),
                "busbw_8g": median(busbw),
                "verdicts": sorted(set(verdicts)),
            })
    return rows


def eight_gpu_model(path: Path = EIGHT_GPU) -> list[dict[str, Any]]:
    """The recorded 8x H200 nccl-tests full sweep: collective GPU-seconds of all rows vs the default rows."""
    text = path.read_text()
    run = parse_text(text)
    test = run.test("all_reduce")
    if test is None:
        return []
    gpus = len(test.devices) or 8
    out = []
    for sweep, rows in (("full", test.rows), ("default", [r for r in test.rows if r.size >= DEFAULT_MIN])):
        seconds = collective_seconds(text, rows)
        out.append({"source": f"{path.name} (nccl-tests 2.19.6, 8x H200, rows only)", "sweep": sweep,
                    "gpus": gpus, "sizes": len(rows), "collective_s": seconds, "collective_gpu_s": gpus * seconds,
                    "busbw_8g": _busbw_at(run, 8 * GIB) or 0.0})
    return out


def run() -> dict[str, Any]:
    """The section's data: measured (recorded) rows, the 8-GPU model, and the full/default ratios."""
    measured = recorded()
    model = eight_gpu_model()
    by_sweep = {r["sweep"]: r for r in measured}
    ratio = (by_sweep["full"]["gpu_s"] / by_sweep["default"]["gpu_s"]
             if {"full", "default"} <= by_sweep.keys() and by_sweep["default"]["gpu_s"] else None)
    model_by = {r["sweep"]: r for r in model}
    model_ratio = (model_by["full"]["collective_s"] / model_by["default"]["collective_s"]
                   if {"full", "default"} <= model_by.keys() and model_by["default"]["collective_s"] else None)
    return {"measured": measured, "eight_gpu_model": model, "gpu_s_ratio": ratio,
            "eight_gpu_collective_ratio": model_ratio}


def runs_from_times(times: str, prefix: str) -> list[dict[str, Any]]:
    """Parse nccl_record.sh's times.txt (`SWEEP RUN rc=.. start=.. end=.. gpus=.. cmd=..` lines)."""
    runs = []
    for line in times.splitlines():
        if " cmd=" not in line:
            continue
        head, command = line.split(" cmd=", 1)
        sweep, number, *pairs = head.split()
        fields = dict(pair.split("=", 1) for pair in pairs)
        start, end = float(fields["start"]), float(fields["end"])
        runs.append({"sweep": sweep, "run": int(number), "file": f"{prefix}_{sweep}_{number}.txt",
                     "rc": int(fields["rc"]), "gpus": int(fields["gpus"]), "start": start, "end": end,
                     "wall_s": round(end - start, 3), "command": " ".join(command.split())})
    return runs


def import_recording(out: Path, prefix: str, device: str, fixtures: Path = FIXTURES) -> Path:
    """Copy an nccl_record.sh output directory into the fixtures as PREFIX_* files plus PREFIX_runs.json."""
    probe = (out / "probe.txt").read_text()
    recorded_at = next((line.split(": ", 1)[1] for line in probe.splitlines() if line.startswith("date: ")), "")
    runs = runs_from_times((out / "times.txt").read_text(), prefix)
    fixtures.mkdir(parents=True, exist_ok=True)
    for item in runs:
        source = out / f"{item['sweep']}_{item['run']}.txt"
        (fixtures / item["file"]).write_text(source.read_text())
    (fixtures / f"{prefix}_probe.txt").write_text(re.sub(r"\x1b\[[0-9;]*m", "", probe))
    meta = fixtures / f"{prefix}_runs.json"
    meta.write_text(json.dumps({"recorded": recorded_at, "device": device,
                                "recorder": "sh bench/nccl_record.sh OUT (NCCL_NVLS_ENABLE=0)", "runs": runs},
                               indent=2) + "\n")
    return meta


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Import an nccl_record.sh output directory as fixtures.")
    parser.add_argument("out", type=Path, help="the directory nccl_record.sh wrote")
    parser.add_argument("prefix", help="file prefix, e.g. h200x8_nccltests")
    parser.add_argument("--device", required=True, help="what the machine was, in words")
    args = parser.parse_args()
    print(import_recording(args.out, args.prefix, args.device))
