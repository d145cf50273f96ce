"""Daemon-side faults (issue 22): the Git remote, the state directory and database, SIGKILL, the clock.

The daemon (`reconciler run`, real Git, real SQLite, the testbed's real Slurm) follows the fault bed's Git
remote. Each fault is injected at seeded random points; after it ends the daemon must converge the cluster to
the branch head without a payload file that is neither the old nor the new version, without killing a job, and
without leaving a drain behind. Counted into the README table (tests/faults/record.py).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.harness import DaemonProcess, git, write_config
from tests.faults.bed import COMPUTES, FaultBed, payload_yaml, wait_until
from tests.faults.record import FaultTally
from tests.transport.sshd_server import free_port

pytestmark = pytest.mark.testbed


class Daemons:
    """Daemons on the fault bed's remote, each with its own state directory; all killed at the end."""

    def __init__(self, bed: FaultBed) -> None:
        self.bed = bed
        self.started: list[DaemonProcess] = []
        self.count = 0

    def start(self, state_dir: Path | None = None, env: dict[str, str] | None = None, **config: Any) -> DaemonProcess:
        """`reconciler run` in enforce mode, polling every second."""
        self.count += 1
        state_dir = state_dir or self.bed.root / f"dstate{self.count}"
        values: dict[str, Any] = {"repository": {"url": str(self.bed.remote.bare), "branch": "main"},
                                  "mode": "enforce", "poll_interval": "1s", "drift_interval": "10m",
                                  "state_dir": str(state_dir), "metrics_listen": f"127.0.0.1:{free_port()}",
                                  "log_format": "json", "retry": {"initial": "1s", "max": "3s"}}
        values.update(config)
        path = write_config(self.bed.root / f"dconfig{self.count}.yaml", **values)
        daemon = DaemonProcess(config=path, state_dir=state_dir, log_path=self.bed.root / f"daemon{self.count}.log",
                               env=env or {}).start()
        self.started.append(daemon)
        return daemon

    def restart(self, daemon: DaemonProcess) -> DaemonProcess:
        """The same daemon (config, state, log) started again."""
        again = DaemonProcess(config=daemon.config, state_dir=daemon.state_dir, log_path=daemon.log_path,
                              env=daemon.env).start()
        self.started.append(again)
        return again


@pytest.fixture
def daemons(fbed: FaultBed) -> Iterator[Daemons]:
    """A daemon factory whose daemons are killed when the test ends (the next test starts from a clean slate)."""
    made = Daemons(fbed)
    yield made
    for daemon in made.started:
        daemon.kill()


def push_version(bed: FaultBed, edit_cluster: bool = False, extra: dict[str, str] | None = None) -> str:
    """Bump the payload, copy the desired state into the remote's clone, commit and push; the commit."""
    bed.bump(edit_cluster)
    for name in ("faults.yaml", "cluster.yaml"):
        shutil.copy(bed.desired / name, bed.remote.work / name)
    for name, text in (extra or {}).items():
        (bed.remote.work / name).write_text(text)
    git(bed.remote.work, "add", "-A")
    git(bed.remote.work, "commit", "-qm", f"payload {bed.version}")
    git(bed.remote.work, "push", "-q", "-f", "origin", "HEAD:main")
    return bed.remote.head()


def alive(daemon: DaemonProcess) -> bool:
    """The daemon process still runs."""
    return daemon.proc is not None and daemon.proc.poll() is None


def events(daemon: DaemonProcess, name: str) -> list[dict[str, Any]]:
    """The daemon's JSON log events called NAME."""
    return [e for e in daemon.events() if e.get("event") == name]


def converged(bed: FaultBed, daemon: DaemonProcess, commit: str, timeout: float = 120) -> float | None:
    """Seconds until the daemon reports COMMIT applied and every node holds the current payload; None if not."""
    started = time.monotonic()
    ok = wait_until(lambda: daemon.status().get("applied_commit") == commit
                    and bed.versions() == dict.fromkeys(COMPUTES, bed.version), timeout, step=0.5)
    return time.monotonic() - started if ok else None


def baseline(bed: FaultBed, daemons: Daemons) -> tuple[DaemonProcess, str]:
    """A daemon that has applied a fresh head (the starting point of a fault test)."""
    bed.start_sentinels(COMPUTES)
    commit = push_version(bed)
    daemon = daemons.start()
    assert converged(bed, daemon, commit, 180) is not None, daemon.log_tail()
    return daemon, commit


def fetch_failures(daemon: DaemonProcess) -> int:
    """How many `source.fetch_failed` events the daemon has logged."""
    return len(events(daemon, "source.fetch_failed"))


def reported_source_error(daemon: DaemonProcess, before: int) -> bool:
    """A fetch failure logged since BEFORE of them, and `reconciler status` naming the source error."""
    return wait_until(lambda: fetch_failures(daemon) > before, 15) and bool(daemon.status().get("source_error"))


def _assert_clean(tally: FaultTally) -> None:
    assert tally.injected > 0
    assert tally.torn_files == 0, tally
    assert tally.jobs_killed == 0, tally
    assert tally.recovered == tally.injected, tally


# ---------------------------------------------------------------- the Git remote


def test_git_remote_unreachable_then_back(fbed: FaultBed, daemons: Daemons, rng: random.Random,
                                          repeats: Callable[[int, int], int],
                                          tally: Callable[[str], FaultTally]) -> None:
    """The remote's path gone for 2-4 s (seeded): each time a fetch failure is logged and `reconciler status`
    names the source error, the daemon keeps the cluster as it is and keeps running (no exit, no crash loop);
    once the remote is back, a new commit is applied."""
    record = tally("Git remote unreachable")
    daemon, _ = baseline(fbed, daemons)
    away = fbed.remote.bare.with_name("remote.git.away")
    for _ in range(repeats(1, 10)):
        before, failures = fbed.versions(), fetch_failures(daemon)
        fbed.remote.bare.rename(away)
        try:
            time.sleep(rng.uniform(2.0, 4.0))
            said = reported_source_error(daemon, failures)
            assert alive(daemon) and fbed.versions() == before
        finally:
            away.rename(fbed.remote.bare)
        ended = time.monotonic()
        commit = push_version(fbed)
        seconds = converged(fbed, daemon, commit)
        record.injection(said and seconds is not None and alive(daemon),
                         None if seconds is None else time.monotonic() - ended,
                         fbed.torn({fbed.version}), fbed.killed(COMPUTES), note="" if said else "not reported")
    _assert_clean(record)


def test_git_remote_returning_garbage(fbed: FaultBed, daemons: Daemons, rng: random.Random,
                                      repeats: Callable[[int, int], int],
                                      tally: Callable[[str], FaultTally]) -> None:
    """The remote's branch ref and packs overwritten with garbage: fetches fail (logged, named by `reconciler
    status`), nothing is applied, the daemon runs on; the repository restored, the next commit is applied."""
    record = tally("Git remote returning garbage")
    daemon, _ = baseline(fbed, daemons)
    for _ in range(repeats(1, 10)):
        saved = fbed.root / "remote.saved"
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(fbed.remote.bare, saved)
        before, failures = fbed.versions(), fetch_failures(daemon)
        ref = fbed.remote.bare / "refs" / "heads" / "main"
        ref.write_bytes(rng.randbytes(20).hex().encode() + b"\n")  # a ref to an object that does not exist
        for stored in [f for f in (fbed.remote.bare / "objects").rglob("*") if f.is_file()]:
            # every loose object and pack garbage; replaced, never written in place: local clones (the admin's,
            # the daemon's) share these files by hard link
            garbage = stored.with_name(stored.name + ".garbage")
            garbage.write_bytes(rng.randbytes(max(64, stored.stat().st_size)))
            garbage.replace(stored)
        time.sleep(rng.uniform(2.0, 4.0))
        said = reported_source_error(daemon, failures)
        assert alive(daemon) and fbed.versions() == before
        shutil.rmtree(fbed.remote.bare)
        shutil.copytree(saved, fbed.remote.bare)
        ended = time.monotonic()
        commit = push_version(fbed)
        seconds = converged(fbed, daemon, commit)
        record.injection(said and seconds is not None and alive(daemon),
                         None if seconds is None else time.monotonic() - ended,
                         fbed.torn({fbed.version}), fbed.killed(COMPUTES), note="" if said else "not reported")
    _assert_clean(record)


def test_force_push_to_an_older_commit(fbed: FaultBed, daemons: Daemons, repeats: Callable[[int, int], int],
                                       tally: Callable[[str], FaultTally]) -> None:
    """The branch force-pushed back to an older commit is the desired state (a revert by history rewrite): the
    daemon applies it, like any new head, every node getting the older payload whole; pushed forward again,
    the newer one.

    Decided, not accidental: GitSource.fetch uses a forced refspec and follows the branch head wherever it goes.
    Refusing would leave the cluster on a commit the branch no longer holds, with `git push -f` of a known-good
    commit (the quickest revert there is) doing nothing. What guards what is applied is who may push (and the
    signing policy, when set), not the shape of the history."""
    record = tally("force-push to an older commit")
    daemon, _ = baseline(fbed, daemons)
    for _ in range(repeats(1, 10)):
        older_version, older = fbed.version, fbed.remote.head()
        push_version(fbed)
        newer_version = fbed.version
        assert converged(fbed, daemon, fbed.remote.head()) is not None
        git(fbed.remote.work, "push", "-q", "-f", "origin", f"{older}:main")
        git(fbed.remote.work, "reset", "-q", "--hard", older)
        started = time.monotonic()
        ok = wait_until(lambda v=older_version: fbed.versions() == dict.fromkeys(COMPUTES, v), 120)
        torn = fbed.torn({older_version, newer_version})
        fbed.version = older_version
        (fbed.desired / "faults.yaml").write_text(payload_yaml(older_version))
        record.injection(ok and daemon.status().get("applied_commit") == older, time.monotonic() - started, torn,
                         fbed.killed(COMPUTES))
    _assert_clean(record)


def test_commit_with_a_50_mb_file(fbed: FaultBed, daemons: Daemons, repeats: Callable[[int, int], int],
                                  tally: Callable[[str], FaultTally]) -> None:
    """A commit adding a 50 MB YAML file: fetched, refused as over the file limit (the commit is invalid, the
    cluster stays on the last good commit); the next commit without it is applied."""
    record = tally("commit with a 50 MB file")
    daemon, good = baseline(fbed, daemons)
    for _ in range(repeats(1, 3)):
        before = fbed.versions()
        big = "x: |\n" + ("  " + "y" * 98 + "\n") * 500_000
        git(fbed.remote.work, "rm", "-q", "--ignore-unmatch", "big.yaml")
        bad = push_version(fbed, extra={"big.yaml": big})
        started = time.monotonic()
        assert wait_until(lambda bad=bad: (daemon.status().get("head") or {}).get("commit") == bad
                          or any(bad[:12] in json.dumps(e) for e in events(daemon, "commit.invalid")), 120), \
            daemon.log_tail()
        held = fbed.versions() == before and daemon.status().get("applied_commit") == good
        (fbed.remote.work / "big.yaml").unlink()
        fbed.version -= 1
        commit = push_version(fbed)
        seconds = converged(fbed, daemon, commit)
        record.injection(held and seconds is not None and alive(daemon), time.monotonic() - started,
                         fbed.torn({fbed.version}), fbed.killed(COMPUTES))
        good = commit
    _assert_clean(record)


# ---------------------------------------------------------------- the state directory


def test_state_directory_full(fbed: FaultBed, daemons: Daemons, rng: random.Random,
                              repeats: Callable[[int, int], int],
                              tally: Callable[[str], FaultTally]) -> None:
    """The state directory on a small file system filled up: the daemon says so and runs on (no crash loop), the
    database stays sound; with space freed, the pending commit is applied."""
    record = tally("state directory on a full file system")
    state = fbed.root / "fullstate"
    state.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(state)], check=True)
    try:
        fbed.start_sentinels(COMPUTES)
        daemon = daemons.start(state_dir=state)
        first = push_version(fbed)
        assert converged(fbed, daemon, first, 180) is not None, daemon.log_tail()
        for _ in range(repeats(1, 10)):
            filler = state / "filler"
            said = len(events(daemon, "state.write_failed") + events(daemon, "cycle.error"))
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
            commit = push_version(fbed)
            assert wait_until(lambda n=said: len(events(daemon, "state.write_failed") + events(daemon, "cycle.error"))
                              > n, 60), daemon.log_tail()
            time.sleep(rng.uniform(0.5, 2.0))
            assert alive(daemon)
            filler.unlink()
            ended = time.monotonic()
            seconds = converged(fbed, daemon, commit)
            sound = sqlite3.connect(str(state / "state.db")).execute("PRAGMA quick_check").fetchone()[0] == "ok"
            record.injection(seconds is not None and sound and alive(daemon),
                             None if seconds is None else time.monotonic() - ended,
                             fbed.torn({fbed.version}), fbed.killed(COMPUTES))
    finally:
        for daemon in daemons.started:
            daemon.kill()
        subprocess.run(["umount", "-l", str(state)], check=False)
    _assert_clean(record)


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "garbage": lambda path: path.write_bytes(os.urandom(path.stat().st_size or 8192)),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "zero length": lambda path: path.write_bytes(b""),
}


def test_state_db_corrupted_between_runs(fbed: FaultBed, daemons: Daemons, rng: random.Random,
                                         repeats: Callable[[int, int], int],
                                         tally: Callable[[str], FaultTally]) -> None:
    """state.db replaced by garbage, truncated or emptied while the daemon is stopped: on start it says so (the bad
    file moved aside), starts a fresh database, and keeps the cluster as it is (the head it plans is what the
    nodes already hold: nothing is written)."""
    record = tally("state.db truncated or corrupted between runs")
    daemon, commit = baseline(fbed, daemons)
    kinds = sorted(CORRUPTIONS)
    for index in range(repeats(3, 12)):
        kind = kinds[index % len(kinds)] if index < len(kinds) else rng.choice(kinds)
        daemon.stop()
        db = daemon.state_dir / "state.db"
        for extra in daemon.state_dir.glob("state.db-*"):
            extra.unlink()
        mtimes = {n: fbed.exec(n, f"stat -c %Y {fbed_payload()}").stdout for n in COMPUTES}
        CORRUPTIONS[kind](db)
        starts = len(events(daemon, "daemon.start"))
        said_before = len(events(daemon, "state.corrupt_recovered"))
        daemon = daemons.restart(daemon)
        ended = time.monotonic()
        assert wait_until(lambda d=daemon, n=starts: len(events(d, "daemon.start")) > n, 60), daemon.log_tail()
        ok = wait_until(lambda d=daemon: d.status().get("applied_commit") == commit, 120)
        said = len(events(daemon, "state.corrupt_recovered")) > said_before or kind == "zero length"
        kept = mtimes == {n: fbed.exec(n, f"stat -c %Y {fbed_payload()}").stdout for n in COMPUTES}
        record.injection(ok and said and kept and alive(daemon), time.monotonic() - ended,
                         fbed.torn({fbed.version}), fbed.killed(COMPUTES), note=kind)
        assert said, (kind, daemon.log_tail())
        assert kept, kind
        if kind != "zero length":
            assert "moved to" in str(daemon.status().get("state_recovered")), daemon.status()
    assert list(daemon.state_dir.glob("state.db.corrupt-*"))
    _assert_clean(record)


def fbed_payload() -> str:
    """The payload's path on the nodes."""
    from tests.faults.bed import PAYLOAD

    return PAYLOAD


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
    _assert_clean(record)


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
    _assert_clean(record)


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
    _assert_clean(record)
