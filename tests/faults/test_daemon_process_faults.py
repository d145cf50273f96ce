"""Daemon-side faults (issue 22): the daemon SIGKILLed mid-apply, a node rebooted under the fact agent, the clock.

As tests/faults/test_daemon_faults.py (the Git remote, the state directory): the daemon follows the fault bed's Git
remote; after each fault it must converge the cluster to the branch head with no torn payload, no killed job and
no drain left behind. Counted into the docs/faults.md table (tests/faults/record.py).
"""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.daemon.harness import DaemonProcess, git
from tests.faults.bed import COMPUTES, FaultBed, wait_until
from tests.faults.daemon_helpers import (
    Daemons,
    alive,
    assert_clean,
    baseline,
    converged,
    events,
    push_version,
)
from tests.faults.record import FaultTally

pytestmark = pytest.mark.testbed


# ---------------------------------------------------------------- SIGKILL


DRAIN_NODE = "gpu03"  # gets a short job and a file whose change restarts slurmd rolling (drain first)
RESTART_FILE = "/etc/reconciler-fault/restart.conf"


def restart_yaml(version: int) -> str:
    """restart.yaml: a file on DRAIN_NODE whose change restarts slurmd, rolling (drained first when jobs run)."""
    return (f"files:\n  - path: {RESTART_FILE}\n    nodes: {DRAIN_NODE}\n    mode: '0644'\n"
            f"    content: \"version {version}\\n\"\n    notify: [\"restart slurmd rolling\"]\n")


def job_state(bed: FaultBed, job: str) -> str:
    """Slurm's JobState of JOB (e.g. RUNNING, COMPLETED, CANCELLED), or '' once Slurm forgot it."""
    out = bed.exec("ctl", f"scontrol -o show job {job}").stdout
    found = re.search(r"\bJobState=(\S+)", out)
    return found.group(1) if found else ""


def slurmd_restarted_after_file(bed: FaultBed) -> bool:
    """DRAIN_NODE's slurmd started after RESTART_FILE was last written (the restart it asked for was not lost)."""
    out = bed.exec(DRAIN_NODE, f"echo $(date +%s) $(stat -c %Y {RESTART_FILE}) $(ps -o etimes= -C slurmd | head -1)")
    now, written, running_for = (int(v) for v in out.stdout.split())
    return now - running_for >= written - 1


def last_step(daemon: DaemonProcess, commit: str) -> str:
    """The last apply step the daemon logged for COMMIT (where the SIGKILL landed), or the last event's name."""
    mine = [e for e in daemon.events() if e.get("commit") == commit[:12]]
    steps = [e for e in mine if e.get("event") == "apply.step"]
    if steps:
        return f"{steps[-1].get('node', '')}: {steps[-1].get('step', '')}".strip(": ")
    return str(mine[-1].get("event")) if mine else "before the run started"


def test_daemon_sigkilled_at_random_points_of_an_apply(fbed: FaultBed, daemons: Daemons, rng: random.Random,
                                                       repeats: Callable[[int, int], int],
                                                       tally: Callable[[str], FaultTally]) -> None:
    """Each commit changes the payload (every compute), slurm.conf (`scontrol reconfigure` follows) and a file on
    gpu03 whose change restarts slurmd rolling while a short job runs there (drain, wait for the job, restart,
    resume). The daemon is SIGKILLed at a seeded random moment from 0 to the job's length + 5 s after its run
    starts (files, reconfigure, drain, the wait, the restart, the resume, after), then started again.
    Invariants: every payload whole (old or new) at the kill and new after; the commit applied; the restart not
    lost (gpu03's slurmd started after the file was written); no drain left behind; the short job COMPLETED
    (not killed) and the long jobs still running."""
    record = tally("daemon SIGKILLed at random points of an apply")
    daemon, _ = baseline(fbed, daemons)
    sentinels = [n for n in COMPUTES if n != DRAIN_NODE]
    if (job := fbed.jobs.pop(DRAIN_NODE, None)) is not None:  # a long job there would hold the drain for ever
        fbed.exec("ctl", f"scancel {job}")
    for _ in range(repeats(3, 20)):
        old = fbed.version
        length = rng.uniform(4.0, 7.0)
        short = fbed.exec("ctl", f"sbatch -w {DRAIN_NODE} -N1 -o /dev/null --wrap 'sleep {length:.1f}' "
                                 "--parsable", check=True).stdout.strip().split(";")[0]
        assert wait_until(lambda j=short: job_state(fbed, j) == "RUNNING", 60)
        commit = push_version(fbed, edit_cluster=True, extra={"restart.yaml": restart_yaml(fbed.version + 1)})
        assert wait_until(lambda c=commit, d=daemon: any(e.get("commit") == c[:12] for e in events(d, "run.start")),
                          60), \
            daemon.log_tail()
        time.sleep(rng.uniform(0.0, length + 5.0))  # files, reconfigure, drain, wait, restart, resume, after
        daemon.kill()
        where = last_step(daemon, commit)
        torn = fbed.torn({old, fbed.version})
        ended = time.monotonic()
        daemon = daemons.restart(daemon)
        seconds = converged(fbed, daemon, commit)
        undrained = wait_until(lambda: not fbed.drained(), 60)
        restarted = slurmd_restarted_after_file(fbed)
        assert wait_until(lambda j=short: job_state(fbed, j) not in ("RUNNING", "PENDING", "COMPLETING"), 60)
        state = job_state(fbed, short)
        killed = int(state != "COMPLETED") + fbed.killed(sentinels)
        problems = [what for what, bad in (("not converged", seconds is None), ("drain left", not undrained),
                                           ("restart lost", not restarted), (f"short job {state}", killed))
                    if bad]
        record.injection(seconds is not None and undrained and restarted,
                         None if seconds is None else time.monotonic() - ended,
                         torn + fbed.torn({fbed.version}), killed,
                         note=f"killed at: {where}" + (f" -> {', '.join(problems)}" if problems else ""))
    git(fbed.remote.work, "rm", "-q", "restart.yaml")  # committed with the next test's first push
    assert_clean(record)


def test_node_rebooted_while_the_fact_agent_runs(fbed: FaultBed, daemons: Daemons, rng: random.Random,
                                                 repeats: Callable[[int, int], int],
                                                 tally: Callable[[str], FaultTally]) -> None:
    """The daemon's drift checks ask each node's fact agent every 2 s over a kept session; a node "reboots"
    (every process but its init killed; supervisord starts sshd, munged, slurmd again) at a random moment:
    the daemon reports it, starts a new agent once sshd is back, and applies the next commit everywhere."""
    from tests.faults.test_node_faults import REBOOT

    record = tally("node rebooted while the fact agent runs (daemon)")
    daemon, _ = baseline(fbed, daemons)
    daemon.stop()
    daemon = daemons.start(drift_interval="2s")
    assert wait_until(lambda: len(daemon.events()) > 0 and daemon.status().get("applied_commit"), 60)
    for _ in range(repeats(1, 10)):
        node = rng.choice(COMPUTES)
        others = [n for n in COMPUTES if n != node]
        fbed.start_sentinels(others)
        running = [n for n in others if fbed.job_running(n)]  # a job still pending when the node fell is not counted
        time.sleep(rng.uniform(0.0, 2.0))
        fbed.exec(node, REBOOT)
        assert wait_until(lambda node=node: fbed.exec(node, "pgrep -x sshd && pgrep -x slurmd").returncode == 0, 60)
        ended = time.monotonic()
        fbed.exec("ctl", f"scontrol update nodename={node} state=resume", check=False)
        commit = push_version(fbed)
        seconds = converged(fbed, daemon, commit)
        record.injection(seconds is not None and alive(daemon), None if seconds is None else time.monotonic() - ended,
                         fbed.torn({fbed.version}), fbed.killed(running), note=node)
        fbed.jobs.pop(node, None)
    assert_clean(record)


# ---------------------------------------------------------------- the clock


CHECK_INTERVAL = 12  # > the check worker's 5 s look (CHECK_POLL): a storm would run every 5 s, visibly
DRIFT_INTERVAL = 3
WINDOW = 24.0
CHECKS = ("checks:\n  node:\n    - name: alive\n      nodes: gpu[01-03]\n"
          f"      interval: {CHECK_INTERVAL}s\n      services: [munge]\n")


def _counts(state_dir: Path) -> tuple[int, int]:
    """(reconcile runs, node-check rounds) recorded so far: with no new commit, every run is a drift check
    (started by the drift interval, or by a poll that finds the interval passed)."""
    conn = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        checks = conn.execute("SELECT count(DISTINCT started) FROM check_results").fetchone()[0]
    finally:
        conn.close()
    return int(runs), int(checks)


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process PID has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_clock_jumps_forwards_and_backwards(fbed: FaultBed, daemons: Daemons, repeats: Callable[[int, int], int],
                                            tally: Callable[[str], FaultTally]) -> None:
    """The daemon's wall clock set back an hour, then forward two (RECONCILER_CLOCK_OFFSET_FILE: this daemon
    only, the machine's clock is never touched), with drift checks every 3 s and a node health check every 12 s.
    Over each 24 s window after a jump: at least one drift run and one check round (neither stops), at most as
    many as the intervals allow plus one (no storm: the check worker looks every 5 s, so a check that thinks
    its last run lies in the future would run 4-5 times), and the daemon's CPU time no more than twice that of
    a window without a jump plus 1 s (no busy loop, e.g. of Git fetches)."""
    record = tally("clock jump forwards and backwards (login node)")
    offset = fbed.root / "clock-offset"
    offset.write_text("0")
    fbed.start_sentinels(COMPUTES)
    commit = push_version(fbed, extra={"checks.yaml": CHECKS})
    daemon = daemons.start(env={"RECONCILER_CLOCK_OFFSET_FILE": str(offset)}, drift_interval=f"{DRIFT_INTERVAL}s")
    assert converged(fbed, daemon, commit, 180) is not None, daemon.log_tail()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    assert wait_until(lambda: _counts(daemon.state_dir)[1] > 0, 30), daemon.log_tail()

    def window() -> tuple[int, int, float]:
        runs, checks, cpu = *_counts(daemon.state_dir), _cpu_seconds(pid)
        time.sleep(WINDOW)
        end = _counts(daemon.state_dir)
        return end[0] - runs, end[1] - checks, _cpu_seconds(pid) - cpu

    normal = window()
    most_drift, most_checks = int(WINDOW / DRIFT_INTERVAL) + 1, int(WINDOW / CHECK_INTERVAL) + 1
    for jump in [-3600.0, 7200.0] * repeats(1, 5):
        offset.write_text(str(float(offset.read_text()) + jump))
        drift, checks, cpu = window()
        steady = (1 <= drift <= most_drift and 1 <= checks <= most_checks and cpu <= 2 * normal[2] + 1.0)
        record.injection(steady and alive(daemon), None, fbed.torn({fbed.version}), fbed.killed(COMPUTES),
                         note=f"jump {jump:+.0f}s: drift runs {drift}, check rounds {checks}, cpu {cpu:.1f}s "
                              f"(no jump: {normal[0]}, {normal[1]}, {normal[2]:.1f}s)")
    offset.write_text("0")
    git(fbed.remote.work, "rm", "-q", "checks.yaml")
    daemon.signal(signal.SIGTERM)
    assert_clean(record)
