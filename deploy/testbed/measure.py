#!/usr/bin/python3
"""Measure `testbed up` time, node memory (PSS) and `down` time for several sizes; print a Markdown table.

    sudo deploy/testbed/measure.py 3 16 64 [--runs 3]

Each run brings a testbed named `measure` up (Slurm configured, wall time until sinfo shows every compute
node idle), sums the proportional set size of every process of the testbed (smaps_rollup), and tears it down.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import testbed  # noqa: E402  (sibling module, path set above)

NAME = "measure"
SUBNET = "10.250.200"


def pss_kib(pid: int) -> int | None:
    """Proportional set size of a process in KiB."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def one_run(nodes: int) -> dict[str, float]:
    """Up, measure, down: seconds and MiB."""
    cli = [str(HERE / "testbed")]
    subprocess.run([*cli, "down", "--name", NAME], check=True, capture_output=True)
    start = time.monotonic()
    subprocess.run([*cli, "up", "--name", NAME, "--subnet", SUBNET, "--nodes", str(nodes)], check=True,
                   capture_output=True)
    up = time.monotonic() - start
    time.sleep(2)  # let daemons settle
    layout = testbed.Layout.load(NAME)
    assert layout is not None
    sizes = [s for s in (pss_kib(p) for p in testbed.testbed_pids(layout)) if s is not None]
    start = time.monotonic()
    subprocess.run([*cli, "down", "--name", NAME], check=True, capture_output=True)
    down = time.monotonic() - start
    return {"up": up, "down": down, "procs": len(sizes), "pss": sum(sizes) / 1024}


def main() -> None:
    """Run the measurements and print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="+", type=int, help="numbers of compute nodes")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("| compute nodes (+ ctl) | `up` until all idle | `down` | node processes | PSS of node processes |")
    print("|---|---|---|---|---|")
    for size in args.sizes:
        runs = [one_run(size) for _ in range(args.runs)]

        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        ups = ", ".join(f"{r['up']:.1f}" for r in runs)
        print(f"| {size} (+1) | {med('up'):.1f} s (runs: {ups}) | {med('down'):.2f} s | {med('procs'):.0f} | "
              f"{med('pss'):.0f} MiB ({med('pss') / (size + 1):.1f} MiB per node) |", flush=True)


if __name__ == "__main__":
    main()
