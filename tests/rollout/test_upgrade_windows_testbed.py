"""Issue 46 item 1 on the testbed: a maintenance window closes in the middle of a 16-node driver upgrade.

A real `reconciler run` daemon over real SSH, real Slurm 22.05 (`scontrol reboot` through its RebootProgram),
real apt/dpkg and a real SQLite journal; the NVIDIA packages and nvidia-smi are the testbed's STAND-INS. The
windows are two short ones on one day (10:00-10:01 and 10:03-10:10 UTC); the daemon's wall clock is set
through RECONCILER_CLOCK_OFFSET_FILE (reconciler/common/clock.py, as the clock-jump fault tests do), so the
test decides when each window opens and closes instead of waiting for a real 10:00: before the first window
nothing starts, its close comes with nodes in flight (they finish, nothing new starts), and the rest go in the
second. `reconciler status` says what waits, and until when, in between. The journal's `since` stamps are the
real clock, compared with the real moments the test moved the daemon's clock.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.harness import DaemonProcess, GitRemote
from tests.rollout.conftest import journal
from tests.rollout.upgrade_bed import REPO, pair, poll, seeded, versions
from tests.rollout.upgrade_bed import daemon as run_daemon
from tests.testbed_fixture import Testbed

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(900)]
NODES = [f"gpu{i:02d}" for i in range(1, 17)]
DAY = datetime(2030, 1, 7, tzinfo=UTC)  # a Monday
W1_OPEN, W1_CLOSE, W2_OPEN = (DAY.replace(hour=10, minute=m).timestamp() for m in (0, 1, 3))
UPGRADE = """rollout:
  waves: all
  windows:
    - {days: [mon], start: "10:00", end: "10:01", timezone: UTC}
    - {days: [mon], start: "10:03", end: "10:10", timezone: UTC}
  upgrade:
    max_unavailable: 4
    failure_budget: 0
    drain_timeout: 2m
    reboot_timeout: 4m
    driver_package: nvidia-driver-standin
    gates: [gpu]
"""


def set_clock(offset_file: Path, wall: float) -> float:
    """Make the daemon's wall clock read WALL now; the real time at which it did."""
    now = time.time()
    offset_file.write_text(f"{wall - now}\n")
    return now


def upgrade_of(state_dir: Path) -> dict[str, Any]:
    """The upgrade part of the daemon's rollout journal ({} when none)."""
    return (journal(state_dir) or {}).get("upgrade") or {}


def states(state_dir: Path) -> dict[str, tuple[str, float]]:
    """Node -> (state, since) from the journal."""
    return {n: (str(e.get("state")), float(e.get("since") or 0)) for n, e in upgrade_of(state_dir).get("nodes",
                                                                                                     {}).items()}


def status_text(state_dir: Path) -> str:
    """`reconciler status` as an admin reads it."""
    done = subprocess.run([sys.executable, "-m", "reconciler.cli", "status", "--state-dir", str(state_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_window_closing_mid_upgrade_lets_the_nodes_in_flight_finish_and_the_rest_wait_for_the_next(
        testbed_factory: Callable[..., Testbed], tmp_path: Path) -> None:
    bed = testbed_factory(nodes=len(NODES), packages=True)
    bed.wait_idle(timeout=180)
    old, new = versions(bed)
    remote = GitRemote.create(tmp_path, seeded(bed, tmp_path, pair(old, "gpu[01-16]")))

    offset = tmp_path / "clock-offset"
    set_clock(offset, W1_OPEN - 120)  # two minutes before the first window
    state_dir = tmp_path / "state"
    daemon = run_daemon(tmp_path, remote, state_dir, 1, env={"RECONCILER_CLOCK_OFFSET_FILE": str(offset)})
    try:
        daemon.wait_applied(remote.head(), timeout=180)
        target = remote.commit("driver 550 -> 570 in the maintenance windows",
                               {"rollout.yaml": lambda _: UPGRADE,
                                "packages.yaml": lambda _: pair(new, "gpu[01-16]", "reboot")})
        # before the first window: every node held, none started, and status says until when
        poll("all 16 held for the window", lambda: (upgrade_of(state_dir).get("waiting") or {}).get("nodes")
             == NODES, 300)
        time.sleep(3)
        assert {s for s, _ in states(state_dir).values()} == {"upgrade-required"}
        text = status_text(state_dir)
        assert "not started: gpu[01-16] held: outside the maintenance windows" in text, text
        assert "next opens Mon 2030-01-07 10:00 UTC" in text and "(until 2030-01-07 10:00" in text, text

        opened = set_clock(offset, W1_OPEN + 1)  # the first window opens
        poll("4 nodes done and others in flight", lambda: sum(s == "done" for s, _ in states(state_dir).values())
             >= 4 and any(s not in ("done", "upgrade-required") for s, _ in states(state_dir).values()), 400)
        closed_at = set_clock(offset, W1_CLOSE)  # it closes with nodes in flight
        in_flight = {n for n, (s, _) in states(state_dir).items() if s not in ("done", "upgrade-required")}
        poll("the nodes in flight at the close done and the rest held",
             lambda: all(states(state_dir)[n][0] == "done" for n in in_flight)
             and (upgrade_of(state_dir).get("waiting") or {}).get("kind") == "hold", 400)
        time.sleep(5)  # held: nothing new starts while closed
        between = states(state_dir)
        text = status_text(state_dir)
        started_w1 = {n for n, (s, _) in between.items() if s != "upgrade-required"}
        assert 4 < len(started_w1) < 16 and in_flight <= started_w1, between
        assert all(between[n][0] == "done" for n in started_w1), between
        rest = sorted(set(NODES) - started_w1)
        assert upgrade_of(state_dir)["waiting"]["nodes"] == rest
        assert "held: outside the maintenance windows" in text and "next opens Mon 2030-01-07 10:03 UTC" in text, \
            text
        assert "(until 2030-01-07 10:03" in text, text
        assert opened < closed_at

        reopened = set_clock(offset, W2_OPEN + 1)  # the second window: the rest go
        daemon.wait_applied(target, timeout=600)
    finally:
        daemon.stop()
    log = daemon.log_path.read_text(errors="replace")
    for node in NODES:
        smi = bed.run(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader", check=True).stdout
        assert set(smi.split()) == {new.rsplit("-", 1)[0]}, (node, smi)
        assert log.count(f"upgrade: {node}: resumed") == 1, node
    record = daemon.status()["last_run"]
    assert record is not None and record["outcome"] == "applied", record
    starts = draining_times(daemon)
    assert sorted(starts) == NODES and all(len(t) == 1 for t in starts.values()), starts  # each started once
    # by the log's real-time stamps: none before the first window, none between the close and the second window
    # (2 s: the log line follows the admission by the journal's write, under load of a 16-node upgrade on two
    # cores; the close lasts at least 5 s), the rest in the second
    first = {n for n, (t,) in starts.items() if opened <= t <= closed_at + 2.0}
    second = {n for n, (t,) in starts.items() if t >= reopened}
    assert first == started_w1 and second == set(rest) and not first & second, (starts, opened, closed_at, reopened)
    bed.down()


def draining_times(daemon: DaemonProcess) -> dict[str, list[float]]:
    """Node -> the real times its upgrade started (the daemon's `upgrade: NODE: draining` log lines)."""
    out: dict[str, list[float]] = {}
    for event in daemon.events():
        found = re.fullmatch(r"upgrade: (gpu\d+): draining", str(event.get("step", "")))
        if found:
            stamp = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
            out.setdefault(found.group(1), []).append(stamp)
    return out
