#!/usr/bin/python3
"""Measure `testbed up` time, node memory and `down` time for several sizes; print a Markdown table.

    sudo deploy/testbed/measure.py 3 16 64 [--runs 3]
    sudo deploy/testbed/measure.py 64 256 1000 --light --plan [--runs 1]

Each run brings a testbed named `measure` up (Slurm configured: wall time until sinfo shows every compute
node idle; --light: until every node's sshd listens), sums the proportional set size and the resident set
size of every process of the testbed (smaps_rollup), reads MemAvailable before `up` and 2 s after it, with
--plan times `reconciler plan --format json --per-node` of the generated desired state from the host and
checks that every node was reached (each light node gets its managed file planned), and tears it down.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import desired_state  # noqa: E402  (sibling modules, path set above)
from tb_layout import Layout  # noqa: E402
from tb_teardown import testbed_pids  # noqa: E402

NAME = "measure"
SUBNET = "10.250.208"  # a multiple of 16: wide (/20) testbeds beyond 200 compute nodes need one


def rollup_kib(pid: int) -> tuple[int, int] | None:
    """(PSS, RSS) of a process in KiB."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    values = {line.split(":")[0]: int(line.split()[1]) for line in text.splitlines()
              if line.startswith(("Pss:", "Rss:"))}
    return (values["Pss"], values["Rss"]) if "Pss" in values and "Rss" in values else None


def mem_available_mib() -> float:
    """MemAvailable of the host in MiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def plan(layout: Layout) -> dict[str, float]:
    """Time `reconciler plan` over SSH from the host to every node; fail unless every node was reached."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "plan", "--format", "json", "--per-node",
                           str(layout.desired_state)], capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.monotonic() - start
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"plan failed ({proc.returncode}): {proc.stderr[-2000:]}")
    data = json.loads(proc.stdout)
    marker = desired_state.LIGHT_FILE if layout.light else None
    reached = {c["node"] for c in data["changes"] if marker is None or c["resource"] == marker}
    if data["unreachable"] or (marker and reached != set(layout.nodes)):
        raise RuntimeError(f"plan did not reach every node: unreachable {data['unreachable']}, "
                           f"{len(reached)} of {len(layout.nodes)} planned")
    return {"plan": seconds}


def one_run(nodes: int, light: bool, with_plan: bool) -> dict[str, float]:
    """Up, measure, (plan,) down: seconds and MiB."""
    cli = [str(HERE / "testbed")]
    subprocess.run([*cli, "down", "--name", NAME], check=True, capture_output=True)
    before = mem_available_mib()
    start = time.monotonic()
    subprocess.run([*cli, "up", "--name", NAME, "--subnet", SUBNET, "--nodes", str(nodes),
                    *(["--light"] if light else [])], check=True, capture_output=True)
    up = time.monotonic() - start
    time.sleep(2)  # let daemons settle
    after = mem_available_mib()
    layout = Layout.load(NAME)
    assert layout is not None
    sizes = [s for s in (rollup_kib(p) for p in testbed_pids(layout)) if s is not None]
    result = {"up": up, "procs": len(sizes), "pss": sum(s[0] for s in sizes) / 1024,
              "rss": sum(s[1] for s in sizes) / 1024, "used": before - after}
    if with_plan:
        result.update(plan(layout))
    start = time.monotonic()
    subprocess.run([*cli, "down", "--name", NAME], check=True, capture_output=True)
    result["down"] = time.monotonic() - start
    return result


def main() -> None:
    """Run the measurements and print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="+", type=int, help="numbers of compute nodes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--light", action="store_true", help="light nodes (sshd only)")
    parser.add_argument("--plan", action="store_true", help="also time `reconciler plan` of every node")
    args = parser.parse_args()
    until = "sshd listening" if args.light else "all idle"
    plan_col = " `reconciler plan` |" if args.plan else ""
    print(f"| compute nodes (+ ctl) | `up` until {until} | `down` | node processes | PSS of node processes "
          f"| RSS sum | MemAvailable drop |{plan_col}")
    print("|---|---|---|---|---|---|---|" + ("---|" if args.plan else ""))
    for size in args.sizes:
        runs = [one_run(size, args.light, args.plan) for _ in range(args.runs)]

        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        ups = ", ".join(f"{r['up']:.1f}" for r in runs)
        plan_runs = ", ".join(f"{r['plan']:.1f}" for r in runs) if args.plan else ""
        plans = f" {med('plan'):.1f} s (runs: {plan_runs}) |" if args.plan else ""
        print(f"| {size} (+1) | {med('up'):.1f} s (runs: {ups}) | {med('down'):.2f} s | {med('procs'):.0f} | "
              f"{med('pss'):.0f} MiB ({med('pss') / (size + 1):.2f} MiB per node) | {med('rss'):.0f} MiB | "
              f"{med('used'):.0f} MiB ({med('used') / (size + 1):.2f} MiB per node) |{plans}", flush=True)


if __name__ == "__main__":
    main()
