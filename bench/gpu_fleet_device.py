"""The GPU fleet's judge and recorder on a real GPU host (issue 48): run the node check's GPU probe (the exact
script `python3 -m bench.gpu_probe_script` prints, written to OUT_DIR/probe.sh) RUNS times, judge each run with
the node check's own judge, record each GPU's reading in a store as the daemon does, and print `reconciler gpus`
and the history of each GPU from that store.

On the device machine, from the repository root, with the project's dependencies on PYTHONPATH:
    python3 -m bench.gpu_fleet_device OUT_DIR [--runs 4] [--every 20] [--node NAME]
OUT_DIR gets probes.txt (each run's raw output after an `@@at EPOCH` line), judge.txt, gpus.txt, state.db.
`import_probes` reads probes.txt back into any store (tests/checks/test_fleet.py does, from the recording).
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from bench.gpu_probe_script import gpu_probe_script
from reconciler.checks.fleet import store as fleet
from reconciler.checks.fleet.readings import readings_from
from reconciler.checks.gpu.xid import XidMemory
from reconciler.checks.node import Probes, judge_gpu_health, remembered
from reconciler.facts.sections import split_sections
from reconciler.model import GpuExpectation


def runs_of(text: str) -> list[tuple[float, str]]:
    """(epoch, raw probe output) of each run in a probes.txt."""
    out: list[tuple[float, str]] = []
    for chunk in text.split("@@at ")[1:]:
        stamp, _, rest = chunk.partition("\n")
        out.append((float(stamp), rest.split("@@done", 1)[0]))
    return out


def import_probes(conn: sqlite3.Connection, text: str, node: str) -> int:
    """Record every run of a probes.txt as NODE's checks would; how many readings were stored."""
    fleet.ensure_schema(conn)
    memory = XidMemory()
    stored = 0
    for at, output in runs_of(text):
        sections = split_sections(output)
        readings, xids = readings_from(node, sections, at, memory)
        stored += fleet.record(conn, readings, xids)
        memory = remembered(sections, memory)
    return stored


def main() -> None:
    """Probe, judge, record, report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--every", type=float, default=20.0)
    parser.add_argument("--node", default="device")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    probe = args.out / "probe.sh"
    probe.write_text(gpu_probe_script())
    raw, judged = [], []
    for n in range(args.runs):
        at = time.time()
        done = subprocess.run(["sh", str(probe)], capture_output=True, text=True, timeout=120)
        output = done.stdout + done.stderr
        raw.append(f"@@at {at:.0f}\n{output}@@done {n + 1}\n")
        sections = split_sections(output)
        found = len(sections["gpu"].output.splitlines()) - 1 if "gpu" in sections else 0
        items = judge_gpu_health(GpuExpectation(count=max(found, 1)), sections, Probes(gpu=True, xid=True,
                                                                                         nvlink=True))
        judged.append(f"run {n + 1} at {at:.0f}: " + "; ".join(f"{i.name} {i.status}: {i.message}" for i in items))
        if n + 1 < args.runs:
            time.sleep(args.every)
    text = "".join(raw)
    (args.out / "probes.txt").write_text(text)
    (args.out / "judge.txt").write_text("\n".join(judged) + "\n")
    conn = sqlite3.connect(args.out / "state.db")
    stored = import_probes(conn, text, args.node)
    conn.close()
    report = [f"{stored} readings recorded from {args.runs} runs"]
    for command in (["gpus"], ["gpus", "--format", "json"]):
        done = subprocess.run([sys.executable, "-m", "reconciler.cli", *command, "--state-dir", str(args.out)],
                              capture_output=True, text=True, timeout=120)
        report.append(f"$ reconciler {' '.join(command)}\n{done.stdout}{done.stderr}")
    conn = sqlite3.connect(args.out / "state.db")
    for (uuid,) in conn.execute("SELECT uuid FROM gpu"):
        done = subprocess.run([sys.executable, "-m", "reconciler.cli", "gpus", str(uuid), "--state-dir",
                               str(args.out)], capture_output=True, text=True, timeout=120)
        report.append(f"$ reconciler gpus {uuid}\n{done.stdout}{done.stderr}")
    conn.close()
    (args.out / "gpus.txt").write_text("\n".join(report) + "\n")
    print("\n".join(judged))
    print("\n".join(report))


if __name__ == "__main__":
    main()
