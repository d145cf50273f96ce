"""The GPU fleet through a real daemon on the testbed (issue 48): the stand-in nvidia-smi and dmesg replay the
recorded H200 with planted faults (an XID 79 on one GPU, a row-remap failure on another, lifetime uncorrectable
ECC errors on a third, all on gpu01) and the stand-in all_reduce_perf replays the recorded 8x H200 run scaled
down run by run on gpu02 (its bandwidth slides). `reconciler gpus` ranks them, exactly those three GPUs are RMA
candidates with the rule each met, the metrics, the status page (and headless Chromium) and an Apprise message
say so; a GPU moved from gpu01 to gpu02 keeps its history."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonBed
from tests.daemon.harness import REPO, DaemonProcess
from tests.daemon.test_daemon_testbed import scrape

pytestmark = pytest.mark.timeout(900)
FAULTS = "/etc/reconciler-standin/gpu-faults"
SCALE = "/etc/reconciler-standin/nccl-scale"
FLEET_CHECKS = """\
checks:
  node:
    - name: gpu-health
      nodes: "gpu[01-02]"
      interval: 4s
      drain_on_fail: false
      gpus: {count: 8, model: H200, driver: "580.", nvlinks: 18}
  nccl:
    - name: nccl
      nodes: "gpu[01-02]"
      mpi: pmi2
      ntasks_per_node: 2    # the testbed's nodes have 2 CPUs
      gpus_per_task: 1
      timeout: 2m
      schedule: 3s
      drain_on_fail: false
"""
# gpu02's NCCL runs, one factor each: three at the recorded bandwidth, then sliding to 80 %.
SLIDE = [1.0, 1.0, 1.0, 0.95, 0.9, 0.85, 0.8, 0.8, 0.8]


def gpus(daemon: DaemonProcess, *args: str) -> str:
    """`reconciler gpus ARGS` on the daemon's store (asserted to succeed)."""
    out = subprocess.run([sys.executable, "-m", "reconciler.cli", "gpus", *args, "--state-dir",
                          str(daemon.state_dir)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def fleet(daemon: DaemonProcess) -> list[dict[str, Any]]:
    """`reconciler gpus --format json`, run in this process (wait_for polls it; gpus() runs the command)."""
    from click.testing import CliRunner

    from reconciler.cli.main import main

    out = CliRunner().invoke(main, ["gpus", "--format", "json", "--state-dir", str(daemon.state_dir)])
    assert out.exit_code == 0, out.output
    return list(json.loads(out.stdout))


def nccl_runs(daemon: DaemonProcess, node: str) -> int:
    return sum(1 for e in daemon.events() if e.get("event") == "check.result" and e.get("check") == "nccl"
               and e.get("node") == node)


def test_three_rma_candidates_a_sliding_node_and_a_moved_gpu(dbed: DaemonBed, tmp_path: Path) -> None:
    from tests.daemon.test_notify import Receiver
    from tests.daemon.test_status_page_testbed import CHROMIUM, chromium

    receiver = Receiver()
    daemon = dbed.daemon(notifications={"targets": [{"url": receiver.url("ops")}], "events": ["gpu-rma"]})
    try:
        daemon.wait_applied(dbed.remote.head(), timeout=300)
        for node in ("gpu01", "gpu02"):
            dbed.bed.exec(node, f"mkdir -p /etc/reconciler-standin && rm -f {FAULTS} {SCALE}")
        dbed.remote.commit("gpu health and nccl, nothing drained", {"checks.yaml": lambda _: FLEET_CHECKS})
        daemon.wait_for("16 GPUs in the fleet", lambda: len(fleet(daemon)) == 16, timeout=120)
        healthy = {(g["node"], g["index"]): g["uuid"] for g in fleet(daemon)}
        assert len(set(healthy.values())) == 16  # a UUID per GPU, different on each node

        # gpu02's bandwidth slides, run by run
        for factor in SLIDE:
            dbed.bed.exec("gpu02", f"echo {factor} > {SCALE}")
            seen = nccl_runs(daemon, "gpu02")
            daemon.wait_for(f"an NCCL run of gpu02 at x{factor}", lambda s=seen: nccl_runs(daemon, "gpu02") > s,
                            timeout=120)
        dbed.bed.exec("gpu01", f"echo 'xid79 1\nremap-failure 2\necc 3 4' > {FAULTS}")
        ranked = daemon.wait_for("three RMA candidates", lambda: (f := fleet(daemon)) and
                                 sum(1 for g in f if g["rma"]) == 3 and f, timeout=120)
        top = {(g["node"], g["index"]): [h["rule"] for h in g["rma"]] for g in ranked[:3]}
        assert top == {("gpu01", 1): ["xid-hardware"], ("gpu01", 2): ["row-remap-failure"],
                       ("gpu01", 3): ["uncorrectable-ecc"]}, ranked[:4]
        sliding = [g for g in ranked[3:] if g["node"] == "gpu02"]
        assert len(sliding) == 8 and all(g["score"] > 0 and not g["rma"] for g in sliding)
        assert all(any("node gpu02: nccl bus bandwidth" in w for w in g["why"]) for g in sliding), sliding[0]
        assert [g["node"] for g in ranked[3:11]] == ["gpu02"] * 8  # above gpu01's healthy GPUs
        table = gpus(daemon, "--rma")
        rows = table.splitlines()[1:]
        assert len(rows) == 3 and all(" RMA " in row and " since " in row for row in rows), table

        # the gauges are set once the check's readings are stored and ranked (loop_checks._fleet), a moment after
        # `reconciler gpus`, which ranks the store itself, shows the candidates
        rma = daemon.wait_for("three RMA candidate series", lambda: len(r := sorted(
            line for line in scrape(daemon).splitlines() if line.startswith("reconciler_gpu_rma_candidate{"))) == 3
            and r, timeout=30)
        assert all('node="gpu01"' in line for line in rma), rma
        message = daemon.wait_for("the RMA message", lambda: [m for m in receiver.on("ops")
                                                              if "RMA candidate" in m.get("title", "")], timeout=60)
        body = "\n".join(m["message"] for m in message)
        assert all(rule in body for rule in ("xid-hardware", "row-remap-failure", "uncorrectable-ecc")), body

        listen = json.loads(daemon.config.read_text())["metrics_listen"]
        with urllib.request.urlopen(f"http://{listen}/", timeout=30) as page:
            text = page.read().decode()
        assert 'id="gpu-fleet"' in text and "3 RMA candidate(s)" in text and text.count('class="gpu rma"') == 3
        if CHROMIUM is not None:  # as an admin sees it
            shot = tmp_path / "gpu-fleet.png"
            taken = chromium(f"--screenshot={shot}", "--window-size=1200,2600", f"http://{listen}/")
            assert shot.exists() and shot.stat().st_size > 10_000, taken.stderr[-2000:]
            dom = chromium("--dump-dom", f"http://{listen}/").stdout
            assert "3 RMA candidate(s)" in dom and 'data-code="79"' in dom

        # gpu01's GPU 0 is moved into gpu02's slot 5: its history follows its UUID
        moved = healthy[("gpu01", 0)]
        dbed.bed.exec("gpu02", f"echo 'uuid 5 {moved} 9999000000005' > {FAULTS}")
        daemon.wait_for("the moved GPU seen on gpu02", lambda: any(
            g["uuid"] == moved and g["node"] == "gpu02" for g in fleet(daemon)), timeout=120)
        history = json.loads(gpus(daemon, moved, "--format", "json"))
        assert [(p["node"], p["index"]) for p in history["places"]] == [("gpu01", 0), ("gpu02", 5)]
        nodes_read = {r["at"] for r in history["readings"]}
        assert len(nodes_read) >= 3, history["readings"]  # its readings from gpu01 are still there
        assert "places:" in gpus(daemon, moved)
    finally:
        for node in ("gpu01", "gpu02"):
            dbed.bed.exec(node, f"rm -f {FAULTS} {SCALE}")
        dbed.remote.commit("no scheduled checks", {"checks.yaml": lambda _: "checks: {}\n"})
        daemon.stop()
        receiver.server.shutdown()
