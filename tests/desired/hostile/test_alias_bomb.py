"""The issue's alias bomb (nine levels of ten aliases) is refused in well under a second and 100 MB.

Measured in a fresh child process that loads the directory, so the figures are the whole process's: its
peak resident memory (the child's own ru_maxrss, interpreter and imports included) and the load time. Timings are printed, asserted only loosely.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.desired.hostile.cases import load_cases, write_case

REPO = Path(__file__).resolve().parents[3]
MEASURE = """
import resource, sys, time


def peak_kib():
    # VmHWM belongs to this process image; ru_maxrss would keep a forking parent's peak across execve
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


started = time.perf_counter()
from reconciler.desired.loader import DesiredStateError, load_dir
imported = time.perf_counter()
try:
    load_dir(sys.argv[1])
    print("ACCEPTED")
except DesiredStateError as exc:
    print(exc.errors[0])
done = time.perf_counter()
print(f"load {done - imported:.3f} s; imports {imported - started:.3f} s; "
      f"peak RSS {peak_kib() / 1024:.1f} MiB")
"""


def test_alias_bomb_refused_fast_and_small(tmp_path: Path) -> None:
    [bomb] = [c for c in load_cases() if c.name == "34-alias-bomb"]
    directory = write_case(bomb, tmp_path / "state", state_dir=tmp_path / "tb", subnet="10.9.8")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", MEASURE, str(directory)], capture_output=True, text=True,
                            timeout=30, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - started
    print(f"\nalias bomb: {result.stdout.strip()} | child wall {wall:.2f} s (with interpreter start)")
    assert result.returncode == 0, result.stderr
    assert "hostile.yaml:" in result.stdout and "over limits" in result.stdout and "alias expansions" in result.stdout
    load_seconds = float(result.stdout.split("load ")[1].split(" s")[0])
    assert load_seconds < 1.0
    peak_mib = float(result.stdout.split("peak RSS ")[1].split(" MiB")[0])  # the child's own VmHWM
    assert peak_mib < 100
