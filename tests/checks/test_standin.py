"""The testbed's all_reduce_perf stand-in: replays the recorded fixtures exactly, honours -b/-e/-g and ranks."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from reconciler.checks.nccl.parser import parse_output
from reconciler.checks.nccl.run import thresholds_of
from reconciler.checks.nccl.verdict import evaluate
from reconciler.model import NcclCheck

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "deploy" / "testbed" / "standins" / "all_reduce_perf"
FIXTURES = REPO / "tests" / "fixtures" / "nccl"
CHECK = NcclCheck.model_validate({"name": "n", "nodes": "gpu01", "thresholds": {"min_busbw": 330, "at_size": "1G"}})


def load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("all_reduce_perf_standin", str(STANDIN))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RECONCILER_STANDIN"))}
    return subprocess.run([sys.executable, str(STANDIN), *args], capture_output=True, text=True, timeout=60,
                          env={**clean, **env}, check=True)


def test_it_says_it_is_a_stand_in_and_embeds_the_fixtures_byte_for_byte() -> None:
    head = STANDIN.read_text().splitlines()[1]
    assert head.startswith("# STAND-IN for nccl-tests' all_reduce_perf (testbed only)")
    module = load()
    assert (FIXTURES / "h200x8_all_reduce_perf.txt").read_text() == module.HEALTHY
    assert (FIXTURES / "handmade_h200x8_degraded_all_reduce.txt").read_text() == module.DEGRADED
    assert os.access(STANDIN, os.X_OK)


def test_full_range_replay_is_the_recording_with_this_host() -> None:
    out = run("-b", "8", "-e", "8G", "-f", "2", "-g", "8").stdout
    recorded = (FIXTURES / "h200x8_all_reduce_perf.txt").read_text()
    strip = [line for line in recorded.splitlines() if not line.startswith("#  Rank")]
    assert [line for line in out.splitlines() if not line.startswith("#  Rank")] == strip
    assert parse_output(out).tests[0].devices[0].host == socket.gethostname()


def test_size_range_and_ranks_follow_the_arguments_and_slurm() -> None:
    run_ = parse_output(run("-b", "1G", "-e", "8G", "-g", "1", SLURM_NTASKS="8", SLURM_PROCID="0").stdout)
    test = run_.tests[0]
    assert run_.ok and test.sizes == [1 << 30, 2 << 30, 4 << 30, 8 << 30] and test.nranks == 8
    assert test.avg_busbw == pytest.approx(363.741, abs=1e-3)  # recomputed over the printed rows
    assert evaluate(run_, thresholds_of(CHECK)[0]).passed


def test_only_rank_0_prints() -> None:
    assert run("-b", "1G", "-e", "8G", SLURM_PROCID="3").stdout == ""


def test_degraded_mode_fails_the_threshold() -> None:
    run_ = parse_output(run("-b", "1G", "-e", "8G", RECONCILER_STANDIN_NCCL="degraded").stdout)
    verdict = evaluate(run_, thresholds_of(CHECK)[0])
    assert run_.ok and not verdict.passed and verdict.reason == "nccl all_reduce busbw 118.6 < 330 GB/s"


def test_the_testbed_installs_it_in_every_node(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "deploy" / "testbed"))
    try:
        tb_prepare = importlib.import_module("tb_prepare")  # deploy/testbed is not a package
    finally:
        sys.path.remove(str(REPO / "deploy" / "testbed"))
    tb_prepare.install_standins(tmp_path)
    installed = tmp_path / "usr" / "local" / "bin" / "all_reduce_perf"
    assert installed.read_bytes() == STANDIN.read_bytes() and os.access(installed, os.X_OK)
