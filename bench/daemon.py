"""Issue 8 item 3: commit-to-applied latency of the daemon, poll mode (Git) and watch mode (local directory).

On a converged bench testbed, `reconciler run` is started once per mode; each run changes one partition's
MaxTime (a git commit + push in poll mode, a file save in watch mode) and times until slurmctld shows it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, log, median, python_env, reconciler_argv
from bench.reconcile import partition_max_time, set_max_time
from bench.testbed import BenchTestbed

POLL_INTERVAL = 2
DEBOUNCE = 0.5
VALUES = ("3-00:00:00", "4-00:00:00")
PARTITION_INDEX = 1  # batch
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.org", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.org"}


class NotBuilt(Exception):
    """Kept for callers that catch it; the section is built."""


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def _wait(bed: BenchTestbed, partition: str, value: str, timeout: float = 120.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if partition_max_time(bed, partition) == value:
            return time.monotonic() - started
        time.sleep(0.1)
    raise RuntimeError(f"daemon did not apply MaxTime={value} within {timeout:.0f}s")


def _start(bed: BenchTestbed, mode: str, source: Path) -> tuple[subprocess.Popen[bytes], Path]:
    state = bed.work / f"daemon-{mode}"
    source_cfg: dict[str, Any] = ({"repository": {"url": str(source), "branch": "main"}} if mode == "poll"
                                  else {"watch": str(source), "debounce": DEBOUNCE})
    config = bed.work / f"daemon-{mode}.yaml"
    config.write_text(json.dumps({**source_cfg, "mode": "enforce", "poll_interval": f"{POLL_INTERVAL}s",
                                  "drift_interval": "1h", "state_dir": str(state), "metrics_listen": None,
                                  "log_format": "json"}))
    logfile = (bed.work / f"daemon-{mode}.log").open("wb")
    proc = subprocess.Popen(reconciler_argv("run", "--config", str(config)), cwd=REPO, env=python_env(),
                            stdout=logfile, stderr=logfile)
    return proc, state


def _measure(bed: BenchTestbed, mode: str, runs: int) -> list[float]:
    partition = "batch"
    if mode == "poll":
        bare, work = bed.work / "cluster.git", bed.work / "admin"
        _git(bed.work, "init", "-q", "--bare", "-b", "main", str(bare))
        shutil.copytree(bed.desired, work)
        _git(work, "init", "-q", "-b", "main")
        _git(work, "add", "-A")
        _git(work, "commit", "-qm", "desired state")
        _git(work, "remote", "add", "origin", str(bare))
        _git(work, "push", "-q", "origin", "main")
        source, edit_dir = bare, work
    else:
        edit_dir = bed.work / "watched"
        shutil.copytree(bed.desired, edit_dir)
        source = edit_dir
    proc, _ = _start(bed, mode, source)
    try:
        time.sleep(POLL_INTERVAL + 3)  # the first cycle: in sync
        latencies = []
        for run in range(runs):
            value = VALUES[run % 2]
            set_max_time(edit_dir, PARTITION_INDEX, value)
            if mode == "poll":
                _git(edit_dir, "commit", "-qam", f"batch MaxTime {value}")
                _git(edit_dir, "push", "-q", "origin", "main")
            latencies.append(_wait(bed, partition, value))
            log(f"daemon {mode} N={bed.computes} run {run + 1}: {latencies[-1]:.2f} s")
            time.sleep(1.0)
        return latencies
    finally:
        proc.terminate()
        proc.wait(40)


def run(nodes: list[int], runs: int) -> list[dict[str, Any]]:
    """Median commit/save-to-applied latency per mode and N."""
    rows = []
    for index, computes in enumerate(nodes):
        with BenchTestbed(computes, 40 + index) as bed:
            for mode in ("poll", "watch"):
                values = _measure(bed, mode, runs)
                setting = f"poll {POLL_INTERVAL}s" if mode == "poll" else f"debounce {DEBOUNCE}s"
                rows.append({"mode": f"{mode} ({setting})", "computes": computes, "runs": runs,
                             "latency_s": round(median(values), 2),
                             "latency_runs_s": [round(v, 2) for v in values]})
    return rows
