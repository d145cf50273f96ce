"""The status page in a real headless Chromium, served by a daemon running against the testbed.

A daemon in enforce mode configures the cluster, then goes progressive (canary gpu01, then gpu02, gated by a real
smoke job): a prolog that fails every job is caught on the canary and rolled back, its fix goes out in two gated
waves. It then runs the NCCL check (stand-in all_reduce_perf) until the degraded gpu02 is drained; a report-mode
daemon on the same state finds a hand edit on gpu01. Chromium loads `/` from that daemon: `--dump-dom` for the
content, `--screenshot` for a PNG (RECONCILER_STATUS_SCREENSHOT=PATH copies it there: docs/status-page.png is made
so).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonBed
from tests.daemon.harness import DaemonProcess
from tests.daemon.test_daemon_testbed import DAEMON_CHECKS
from tests.daemon.test_status_page import parse

CHROMIUM = shutil.which("chromium")
pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (deploy/testbed/testbed deps)")]
HAND_EDIT = "# hand edit on gpu01: not in Git\n"
PROGRESSIVE = """\
rollout:
  waves: progressive
  canary: 1
  steps: ["100%"]
  soak: 1s
  gates: {node_checks: true, smoke_job: true}
"""


def with_prolog(text: str) -> str:
    """An edit of cluster.yaml: slurm.conf names the prolog the patch keeps (the daemon bed's does not)."""
    anchor = "    SlurmdParameters: config_overrides\n"
    assert anchor in text, text
    return text.replace(anchor, anchor + "    Prolog: /etc/slurm/prolog.sh\n")


def prolog(content: str) -> Callable[[str], str]:
    """An edit of patches.yaml replacing the prolog patch's content."""
    def edit(text: str) -> str:
        head, _, _ = text.partition("    content: |\n")
        return head + "    content: |\n" + "".join(f"      {line}\n" for line in content.splitlines())
    return edit


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium (as root it needs --no-sandbox), its own profile in a temp dir."""
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--hide-scrollbars", "--no-first-run", *args], capture_output=True, text=True, timeout=120)


def page_url(daemon: DaemonProcess) -> str:
    return f"http://{json.loads(daemon.config.read_text())['metrics_listen']}/"


def busbw_points(daemon: DaemonProcess) -> int:
    """Points of the shortest line in the page's busbw plot (0 before there is one)."""
    with urllib.request.urlopen(page_url(daemon), timeout=10) as response:
        page = parse(response.read().decode())
    lines = page.attr_values("polyline", "points")
    return min((len(p.split()) for p in lines), default=0) if len(lines) == 2 else 0


def test_status_page_in_headless_chromium(dbed: DaemonBed, tmp_path: Path) -> None:
    def reason(node: str) -> str:
        return dbed.bed.exec("ctl", f"scontrol show node {node} -o").stdout

    original: str | None = None
    kept = {name: (dbed.remote.work / name).read_text() for name in ("cluster.yaml", "rollout.yaml", "patches.yaml")}
    dbed.bed.exec("gpu02", "mkdir -p /etc/reconciler-standin && touch /etc/reconciler-standin/degraded")
    daemon = dbed.daemon()
    report: DaemonProcess | None = None
    try:
        daemon.wait_applied(dbed.remote.head())
        # A rollout to show: progressive waves, a bad prolog caught on the canary and rolled back, then its fix.
        daemon.wait_applied(dbed.remote.commit("progressive rollout, Slurm runs the prolog", {
            "rollout.yaml": lambda _: PROGRESSIVE, "cluster.yaml": with_prolog}))
        bad = dbed.remote.commit("prolog: fails every job", {"patches.yaml": prolog("#!/bin/sh\necho no >&2\nexit 1")})
        daemon.wait_for("the bad prolog rolled back", lambda: (daemon.status().get("rolled_back") or {}).get(bad),
                        timeout=240)
        fixed = dbed.remote.commit("prolog: fixed", {"patches.yaml": prolog("#!/bin/sh\necho fixed\nexit 0")})
        daemon.wait_applied(fixed, timeout=240)
        head = dbed.remote.commit("nccl and daemon checks", {"checks.yaml": lambda _: DAEMON_CHECKS})
        daemon.wait_applied(head)
        daemon.wait_for("gpu02 drained by the nccl check", lambda: "Reason=reconciler: nccl" in reason("gpu02"),
                        timeout=120)
        daemon.stop()
        original = dbed.bed.exec("gpu01", "cat /etc/slurm/gres.conf").stdout
        dbed.bed.exec("gpu01", f"printf '%s' '{HAND_EDIT}' >> /etc/slurm/gres.conf")
        report = reporter = dbed.daemon(mode="report", state_dir=str(daemon.state_dir))
        reporter.wait_for("drift on gpu01", lambda: any(d["node"] == "gpu01" and not d["pending_commit"]
                                                        for d in reporter.status()["drift"]), timeout=60)
        reporter.wait_for("three NCCL results per node", lambda: busbw_points(reporter) >= 3, timeout=120)

        dom = chromium("--dump-dom", page_url(report))
        assert dom.returncode == 0 and "<html" in dom.stdout, dom.stderr[-2000:]
        shot = tmp_path / "status-page.png"
        taken = chromium(f"--screenshot={shot}", "--window-size=1200,2300", page_url(report))
        assert taken.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", taken.stderr[-2000:]
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
        if os.environ.get("RECONCILER_STATUS_SCREENSHOT"):
            shutil.copyfile(shot, os.environ["RECONCILER_STATUS_SCREENSHOT"])
    finally:
        dbed.bed.exec("gpu02", "rm -f /etc/reconciler-standin/degraded")
        if report is not None:
            report.wait_check_passes("nccl", "gpu02")  # not merely "no DRAIN": a retest resumes it for a while
            report.wait_for("gpu02 resumed", lambda: "DRAIN" not in reason("gpu02"), timeout=60)
        if original is not None:
            dbed.bed.exec("gpu01", f"printf '%s' {shlex.quote(original)} > /etc/slurm/gres.conf")
        back = dbed.remote.commit("no scheduled checks; the package's desired state again", {
            "checks.yaml": lambda _: "checks: {}\n", **{name: (lambda _, t=text: t) for name, text in kept.items()}})
        daemon.stop()
        if report is not None:
            report.stop()
        # the bed is the package's: put its slurm.conf and prolog back as the other tests expect them
        restore = dbed.daemon()
        restore.wait_applied(back, timeout=240)
        restore.stop()

    page = parse(dom.stdout)
    text = page.all_text()
    assert [a["id"] for t, a in page.tags if t == "section"] == ["source", "rollout", "runs", "drift", "checks",
                                                                  "drained", "busbw"]
    assert head in page.attr_values("code", "title")  # the applied commit, in full in its title
    assert "report" in text and "drift" in text
    # the rollouts: the fix in two gated waves (canary gpu01, then gpu02), the bad prolog rolled back on the canary
    assert fixed in page.attr_values("code", "title") and bad in page.attr_values("code", "title")
    assert "rolled-back" in text and "complete" in text
    assert "smoke-job ok" in text and "smoke-job failed" in text
    assert "1 canary" in page.texts and "2 step 1" in page.texts, page.texts
    assert "Rolled back (not applied again)" in text and f"reconciler rollout retry {bad[:12]}" in text
    # the hand edit: drift on gpu01 by the slurm_config driver, its diff removing the line (current -> desired)
    assert "gpu01" in page.attr_values("div", "data-node")
    assert "slurm_config" in text and "-" + HAND_EDIT.strip() in text
    # the failing NCCL check and the drain it set, with the reconciler's reason
    assert "all_reduce busbw 120.5 < 330 GB/s" in text  # the degraded replay at the default 4 GiB
    drained = [row for row in page.texts if row.startswith("reconciler: nccl nccl:")]
    assert drained and "DRAIN" in text and "reconciler" in text
    # the bus-bandwidth history as an inline SVG, one line per node, gpu01 at the stand-in's 365.1 GB/s (4 GiB row)
    assert page.attr_values("svg", "data-check") == ["nccl"]
    assert page.attr_values("g", "data-node") == ["gpu01", "gpu02"]
    assert "gpu01 365.1" in text
    assert not [a for t, a in page.tags if t in ("script", "img", "link", "iframe")]
