"""Shared helpers of the benchmarks: paths, subprocesses with timing, medians."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
TESTBED = REPO / "deploy" / "testbed" / "testbed"


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for child Pythons: this checkout first on the path, unbuffered output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def compile_bytecode(tree: Path = REPO) -> None:
    """Write the checkout's (or TREE's) .pyc files, as `pip install` does for an installed reconciler (and did for
    every peer): with PYTHONDONTWRITEBYTECODE set, an editable checkout would otherwise compile every module from
    source on every start, a cost no installed copy pays."""
    import compileall

    for package in ("reconciler", "drivers", "checks", "bench"):
        if (tree / package).is_dir():
            compileall.compile_dir(str(tree / package), quiet=1)


def reconciler_argv(*args: str) -> list[str]:
    """`reconciler ARGS` run by this interpreter from this checkout (the console script's own `main`)."""
    return [sys.executable, "-m", "reconciler.cli", *args]


@dataclass
class Timed:
    """A finished subprocess with its wall time."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    cpu: float = 0.0  # CPU seconds (user + system) of the command and its waited-for children


    def tail(self, lines: int = 20) -> str:
        """The last lines of stdout and stderr, for error messages."""
        text = (self.stdout + "\n" + self.stderr).strip().splitlines()
        return "\n".join(text[-lines:])


def timed_run(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout: float = 1800.0) -> Timed:
    """Run a command to its end; measure its wall time and CPU (RUSAGE_CHILDREN delta; output captured)."""
    cpu = children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                          check=False)
    seconds = time.perf_counter() - start
    return Timed(list(argv), proc.returncode, proc.stdout, proc.stderr, seconds, children_cpu() - cpu)


def children_cpu() -> float:
    """CPU seconds of the waited-for children of this process (RUSAGE_CHILDREN: user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median(values: Sequence[float]) -> float:
    """The median (0.0 for no values)."""
    return statistics.median(values) if values else 0.0


def log(message: str) -> None:
    """Progress on stderr, so stdout carries only the tables."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages now."""
    return [round(v, 2) for v in os.getloadavg()]


def machine() -> str:
    """A short description of this machine: cores, memory, OS."""
    cores = os.cpu_count() or 0
    try:
        mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        mem_kib = 0
    distro = "unknown OS"
    try:
        fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        distro = fields.get("PRETTY_NAME", distro).strip('"')
    except OSError:
        pass
    return f"{cores} cores, {round(mem_kib / 2**20)} GiB, {distro}"


def testbed(*args: str, check: bool = True, timeout: float = 600) -> str:
    """deploy/testbed/testbed ARGS; its stdout (RuntimeError with its stderr's tail when it fails and CHECK)."""
    done = subprocess.run([str(TESTBED), *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"testbed {' '.join(args[:3])}: {done.stderr[-800:]}")
    return done.stdout
