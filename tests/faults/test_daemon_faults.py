"""Daemon-side faults (issue 22): the Git remote, the state directory and database.

The daemon (`reconciler run`, real Git, real SQLite, the testbed's real Slurm) follows the fault bed's Git
remote. Each fault is injected at seeded random points; after it ends the daemon must converge the cluster to
the branch head without a payload file that is neither the old nor the new version, without killing a job, and
without leaving a drain behind. Counted into the docs/faults.md table (tests/faults/record.py).
SIGKILL, a node reboot under the fact agent and the clock: tests/faults/test_daemon_process_faults.py.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.daemon.harness import DaemonProcess, git
from tests.faults.bed import COMPUTES, FaultBed, payload_yaml, wait_until
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


def fetch_failures(daemon: DaemonProcess) -> int:
    """How many `source.fetch_failed` events the daemon has logged."""
    return len(events(daemon, "source.fetch_failed"))


def reported_source_error(daemon: DaemonProcess, before: int) -> bool:
    """A fetch failure logged since BEFORE of them, and `reconciler status` naming the source error."""
    return wait_until(lambda: fetch_failures(daemon) > before, 15) and bool(daemon.status().get("source_error"))



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
    assert_clean(record)


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
    assert_clean(record)


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
    assert_clean(record)


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
    assert_clean(record)


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
    assert_clean(record)


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
    assert_clean(record)


def fbed_payload() -> str:
    """The payload's path on the nodes."""
    from tests.faults.bed import PAYLOAD

    return PAYLOAD
