"""The real nccl-tests runs recorded on the device machine: every fixture parses, and section 5 of the bench
(bench/nccl.py, bench/README.md's NCCL table) is computed from them."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from bench.nccl import FIXTURES, FULL, check_default_args, recorded
from bench.nccl import run as nccl_section
from bench.report import nccl_table
from reconciler.checks.nccl.parser import parse_output
from reconciler.checks.nccl.run import RANK0, parse_batch
from reconciler.checks.nccl.verdict import representative_busbw

REPO = Path(__file__).resolve().parents[3]
METAS = sorted(FIXTURES.glob("*_runs.json"))
RUNS = [(meta, item) for meta in METAS for item in json.loads(meta.read_text())["runs"]]
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([KMG]?)", text).groups()  # type: ignore[union-attr]
    return int(number) * UNITS[unit]


def test_every_output_file_is_listed_and_the_device_is_named() -> None:
    assert len(METAS) == 2 and len(RUNS) == 68
    assert sorted(p.name for p in FIXTURES.glob("*.out")) == sorted(item["file"] for _, item in RUNS)
    readme = (FIXTURES / "README.md").read_text()
    for meta in METAS:
        data = json.loads(meta.read_text())
        assert "2x NVIDIA H200" in data["device"] and "nvidia-h200-x2" in data["device"]
        assert data["recorded"].startswith("2026-11-22") and meta.name in readme
        probe = (FIXTURES / meta.name.replace("_runs.json", "_probe.txt")).read_text()
        gpus = set(re.findall(r"^GPU \d: NVIDIA H200 \(UUID: (GPU-[0-9a-f-]+)\)", probe, re.MULTILINE))
        assert len(gpus) == 2 and "GPU0\t X \tNV18" in probe
    assert "nvidia-h200-x2" in readme and "2x NVIDIA H200" in readme


@pytest.mark.parametrize(("meta", "item"), RUNS, ids=[item["file"] for _, item in RUNS])
def test_recorded_output_parses_as_its_command_line_says(meta: Path, item: dict[str, object]) -> None:
    """The launcher's batch output: rank-0 line, nccl-tests 2.19.6 on 2 H200s, the sizes, iterations, check."""
    config = json.loads(meta.read_text())["configs"][item["config"]]
    step = parse_batch((FIXTURES / str(item["file"])).read_text(), 1)[0]
    assert step.rc == item["rc"] == 0 and step.seconds == pytest.approx(float(str(item["wall_s"])), abs=1e-3)
    assert RANK0.search(step.output) and config["command"].endswith(f"all_reduce_perf {config['args']} -g 2")
    run = parse_output(step.output, exit_code=step.rc)
    test = run.test("all_reduce")
    assert run.ok and test is not None and test.nranks == 2
    assert "2.19.6" in (test.tool or "") and {d.name for d in test.devices} == {"NVIDIA H200"}
    args = dict(zip(config["args"].split()[::2], config["args"].split()[1::2], strict=True))
    assert test.rows[0].size == size(args["-b"]) and test.rows[-1].size == size(args["-e"])
    header = re.search(r"warmup iters: (\d+) iters: (\d+) .*validation: (\d)", step.output)
    assert header and header.groups() == (args.get("-w", "1"), args.get("-n", "20"), args.get("-c", "1"))
    assert test.total_wrong in (0, None) and test.out_of_bounds in (0, None)


def test_bench_section_is_computed_from_the_fixtures() -> None:
    """GPU-seconds, shares and busbw recomputed here from the raw files match bench/nccl.py's rows."""
    rows = {(r["source"].split()[0], r["config"]): r for r in recorded()}
    for meta in METAS:
        data = json.loads(meta.read_text())
        prefix = meta.name.removesuffix("_runs.json")
        gpu_s, busbw = {}, {}
        for name in data["configs"]:
            outputs = [(FIXTURES / r["file"]).read_text() for r in data["runs"] if r["config"] == name]
            walls = []
            for text in outputs:
                start, end = text.split("@@reconciler-begin time.0\n", 1)[1].split()[1:3]
                walls.append(float(end) - float(start))
            gpu_s[name] = 2 * statistics.median(walls)
            tests = [parse_output(parse_batch(t, 1)[0].output).test("all_reduce") for t in outputs]
            busbw[name] = statistics.median([representative_busbw(t, 1 << 30) or 0.0 for t in tests if t])
            row = rows[(prefix, name)]
            assert row["gpu_s"] == pytest.approx(gpu_s[name]) and row["busbw"] == pytest.approx(busbw[name])
            assert row["share"] == pytest.approx(gpu_s[name] / gpu_s[FULL])
        default = next(n for n, c in data["configs"].items() if c["args"] == check_default_args())
        assert gpu_s[default] <= gpu_s[FULL] / 4  # the target, on the recorded data
        assert busbw[default] >= 0.95 * rows[(prefix, FULL)]["peak"]


def test_bench_readme_table_comes_from_the_fixtures() -> None:
    """bench/README.md holds, row for row, the NCCL table that `python -m bench --sections nccl` writes."""
    readme = (REPO / "bench" / "README.md").read_text()
    section = nccl_section()
    assert section["default_meets"] and len(section["default_shares"]) == 2
    for line in nccl_table(section).markdown().splitlines():
        assert line in readme, line
