"""Idle GPU-hours of a reboot upgrade, `mode: drain` against `mode: reservation` (issue 46 item 6), on the same
workload: `python -m bench.gpu_hours --runs 2 --out bench/results/gpu-hours-DATE`.

One testbed (real Slurm 22.05, eight gres GPUs per node, real apt/dpkg; the driver packages and nvidia-smi are the
testbed's STAND-INS, the reboot goes through Slurm's RebootProgram), two compute nodes upgraded at once
(max_unavailable 2, gates [gpu]). Each run, before the apply, each node gets one long job on one GPU (gpu01: time
limit 3 min, runs 150 s; gpu02: 2 min, runs 90 s); as soon as the apply's log says a node is taken (`upgrade: NODE:
waiting-for-jobs`), ten short jobs pinned to it are queued (1 to 3 GPUs, time limit 1 min, 20 to 50 s each). Then:

- drain: the node is drained at once; its seven free GPUs stay idle until the long job ends; the short jobs wait
  for the resume.
- reservation: the node gets a maintenance reservation starting at the long job's EndTime; the short jobs run on
  the free GPUs until no job it waits for is left (or the reservation starts), then it is drained.

Per upgraded node, the window is from the apply's `upgrade: NODE: draining` (the upgrade takes the node: a drain or
a reservation) to its `upgrade: NODE: resumed`, both stamped with the host's clock as the lines arrive. Busy
GPU-seconds are each job's GPUs times its overlap with the window, from `scontrol show job` (StartTime, EndTime,
TresPerNode), polled every 3 s during the run (slurmctld forgets a finished job after MinJobAge); idle GPU-seconds =
GPUs x window - busy. The testbed's jobs run minutes where a site's run hours: what transfers is the ratio, and the
absolute idle time grows with the long job's remaining time.

Modes alternate ABBA over the runs; the driver stand-in goes up and down a version each run.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from functools import cmp_to_key
from pathlib import Path
from typing import Any

from bench.common import log, machine, median, python_env, reconciler_argv, testbed
from bench.upgrade import DRIVER, FM, packages_yaml
from reconciler.common.versions import deb_compare

NAME, SUBNET = "bgh", "10.244.0"
NODES = ["gpu01", "gpu02"]
LONG = {"gpu01": (3, 150), "gpu02": (2, 90)}  # time limit (minutes), seconds it runs
SHORTS = [(1, 20), (2, 35), (3, 50), (2, 25), (1, 40), (3, 30), (2, 45), (1, 20), (2, 35), (3, 50)]  # GPUs, seconds
ROLLOUT = """rollout:
  waves: all
  upgrade:
    mode: {mode}
    max_unavailable: 2
    drain_timeout: 10m
    reboot_timeout: 5m
    driver_package: nvidia-driver-standin
    gates: [gpu]
"""


def on(node: str, command: str, check: bool = True) -> str:
    """COMMAND on NODE over the testbed's SSH; its stdout."""
    config = Path("/var/lib/reconciler-testbed") / NAME / "ssh_config"
    done = subprocess.run(["ssh", "-F", str(config), node, command], capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise RuntimeError(f"{node}: {command[:80]}: {done.stderr[-400:]}")
    return done.stdout


def up() -> tuple[Path, list[str]]:
    """A fresh testbed with the package repository; its desired state copied and applied with the oldest pair;
    (the copy, the stand-in driver's versions oldest first)."""
    testbed("down", "--name", NAME, check=False)
    state = Path(testbed("up", "--packages", "--nodes", str(len(NODES)), "--name", NAME, "--subnet",
                         SUBNET, timeout=900).strip().splitlines()[-1])
    manifest = json.loads((state.parent / "packages" / "manifest.json").read_text())["deb"]["standin"]
    versions = sorted(manifest[DRIVER], key=cmp_to_key(deb_compare))
    assert manifest[FM] == manifest[DRIVER], manifest
    desired = Path(tempfile.mkdtemp(prefix="bench-gpu-hours-")) / "desired"
    shutil.copytree(state, desired)
    (desired / "packages.yaml").write_text(packages_yaml(versions[0], "gpu[01-02]", needs=False))
    apply(desired)
    return desired, versions


def apply(desired: Path, on_line: Any = None) -> list[tuple[float, str]]:
    """`reconciler apply --yes DESIRED`; each output line with the host's time it arrived (ON_LINE called per
    line)."""
    proc = subprocess.Popen(reconciler_argv("apply", "--yes", str(desired)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=python_env())
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.time(), line.rstrip("\n")))
        if on_line is not None:
            on_line(lines[-1][1])
    if proc.wait() != 0:
        raise RuntimeError("apply failed:\n" + "\n".join(text for _, text in lines[-40:]))
    return lines


def sbatch(node: str, gpus: int, minutes: int, seconds: int) -> str:
    """A job pinned to NODE; its id."""
    return on("ctl", f"sbatch --parsable -w {node} -p debug --gres=gpu:{gpus} --time={minutes} -o /dev/null "
                     f"--wrap 'sleep {seconds}'").strip().split(";")[0]


class Jobs:
    """`scontrol -o show job` polled every 3 s: the latest record of every job seen."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, str]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.read()
            self.stop.wait(3)

    def read(self) -> None:
        """Read every job now."""
        for line in on("ctl", "scontrol -o show job", check=False).splitlines():
            fields = dict(re.findall(r"(\w[\w/:]*)=(\S*)", line))
            if "JobId" in fields:
                self.records[fields["JobId"]] = fields


def epoch(text: str, offset: timedelta) -> float | None:
    """A Slurm time (the controller's local time) as seconds since the epoch; None for Unknown/None."""
    try:
        return datetime.fromisoformat(text).replace(tzinfo=timezone(offset)).timestamp()
    except ValueError:
        return None


def one_run(desired: Path, mode: str, version: str, offset: timedelta, gpus: int) -> dict[str, Any]:
    """One upgrade in MODE to VERSION under the workload; the measured row."""
    on("ctl", "scancel -u root", check=False)
    longs = {node: sbatch(node, 1, *LONG[node]) for node in NODES}
    deadline = time.monotonic() + 60
    while not all(on("ctl", f"squeue -h -j {j} -o %T").strip() == "RUNNING" for j in longs.values()):
        if time.monotonic() > deadline:
            raise RuntimeError("long jobs not running")
        time.sleep(0.5)
    shorts: dict[str, list[str]] = {node: [] for node in NODES}
    submitted: dict[str, float] = {}

    def taken(line: str) -> None:
        found = re.search(r"upgrade: (gpu\d+): waiting-for-jobs", line)
        if found and not shorts[found.group(1)]:
            def queue(node: str = found.group(1)) -> None:
                for g, s in SHORTS:
                    job = sbatch(node, g, 1, s)
                    shorts[node].append(job)
                    submitted[job] = time.time()
            threading.Thread(target=queue, daemon=True).start()

    (desired / "rollout.yaml").write_text(ROLLOUT.format(mode=mode))
    (desired / "packages.yaml").write_text(packages_yaml(version, "gpu[01-02]", needs=True))
    jobs = Jobs()
    jobs.thread.start()
    try:
        lines = apply(desired, taken)
        deadline = time.monotonic() + 240  # the short jobs all started: their wait is known
        while time.monotonic() < deadline:
            jobs.read()
            if all(jobs.records.get(j, {}).get("JobState") not in (None, "PENDING") for js in shorts.values()
                   for j in js):
                break
            time.sleep(2)
    finally:
        jobs.stop.set()
        jobs.thread.join(10)
    on("ctl", "scancel -u root", check=False)

    def at(pattern: str) -> float:
        return next(t for t, text in lines if re.search(pattern, text))
    row: dict[str, Any] = {"mode": mode, "version": version, "nodes": {}}
    for node in NODES:
        start, end = at(rf"upgrade: {node}: draining"), at(rf"upgrade: {node}: resumed")
        busy = 0.0
        for record in jobs.records.values():
            if record.get("NodeList") != node:
                continue
            began, ended = epoch(record.get("StartTime", ""), offset), epoch(record.get("EndTime", ""), offset)
            count = int((re.search(r"gpu:(\d+)", record.get("TresPerNode", "")) or ["", "0"])[1])
            if began is not None and ended is not None and record.get("JobState") != "PENDING":
                busy += count * max(0.0, min(ended, end) - max(began, start))
        waits = [epoch(jobs.records[j]["StartTime"], offset) - submitted[j] for j in shorts[node]  # type: ignore[operator]
                 if jobs.records.get(j, {}).get("JobState") not in (None, "PENDING")]
        long = jobs.records.get(longs[node], {})
        row["nodes"][node] = {
            "window_s": round(end - start, 1), "busy_gpu_s": round(busy, 1),
            "idle_gpu_s": round(gpus * (end - start) - busy, 1),
            "short_in_window": sum(1 for j in shorts[node] if (b := epoch(jobs.records.get(j, {}).get(
                "StartTime", ""), offset)) is not None and start <= b <= end),
            "short_wait_median_s": round(median(waits), 1), "shorts_started": len(waits),
            "long_job": f"{long.get('JobState')} {long.get('ExitCode')}"}
    row["upgrade_s"] = round(max(at(rf"upgrade: {n}: resumed") for n in NODES)
                             - min(at(rf"upgrade: {n}: draining") for n in NODES), 1)
    row["idle_gpu_h_per_node"] = round(sum(n["idle_gpu_s"] for n in row["nodes"].values()) / len(NODES) / 3600, 4)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one row per run and node, then the medians per mode."""
    out = ["| run | mode | node | window s | busy GPU-s | idle GPU-s | short jobs run in the window | short job wait "
           "median s | long job | upgrade of both s |", "|" + "---|" * 10]
    for i, r in enumerate(rows, 1):
        for node, n in r["nodes"].items():
            out.append(f"| {i} | {r['mode']} | {node} | {n['window_s']} | {n['busy_gpu_s']} | {n['idle_gpu_s']} | "
                       f"{n['short_in_window']} of {len(SHORTS)} | {n['short_wait_median_s']} | {n['long_job']} | "
                       f"{r['upgrade_s']} |")
    by = {m: [r for r in rows if r["mode"] == m] for m in ("drain", "reservation")}
    idle = {m: median([r["idle_gpu_h_per_node"] for r in rs]) for m, rs in by.items() if rs}
    out += ["", "| mode | idle GPU-hours per upgraded node (median of runs) | ratio to drain | upgrade of both s "
            "(median) |", "|---|---|---|---|"]
    for mode, value in idle.items():
        ratio = f"{value / idle['drain']:.2f}x" if idle.get("drain") else "-"
        out.append(f"| {mode} | {value:.4f} | {ratio} | {median([r['upgrade_s'] for r in by[mode]]):.1f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, write results.json and table.md into --out."""
    p = argparse.ArgumentParser(prog="bench.gpu_hours", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=2, help="runs per mode (ABBA order)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    desired, versions = up()
    offset = timedelta(seconds=int(on("ctl", "date +%z").strip()[:3]) * 3600)
    gpus = int(re.search(r"Gres=gpu:(\d+)", on("ctl", "scontrol show node -o gpu01")).group(1))  # type: ignore[union-attr]
    rows = []
    try:
        for run in range(args.runs * 2):
            mode = ("drain", "reservation", "reservation", "drain")[run % 4]
            version = versions[-1] if run % 2 == 0 else versions[0]
            log(f"gpu hours: run {run + 1}: {mode}, driver to {version}")
            rows.append(one_run(desired, mode, version, offset, gpus))
            log(json.dumps(rows[-1]))
    finally:
        testbed("down", "--name", NAME, check=False)
    text = table(rows)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
        (args.out / "table.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
