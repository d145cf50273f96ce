"""The operator's hand on promotion without a testbed: production's real reconcile loop on a real Git repository,
asking a real HTTP listener for staging's verdict, the `reconciler promote` CLI writing into production's real
SQLite store. Approval, hold and release, going back, a hotfix while staging is down, the hold after a rollback,
and the promotion windows. (What reaches nodes is in test_promotion_steer_testbed.py.)"""

from __future__ import annotations

import json
import time
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.promotion_http import PROMOTION_KEY, note_applied
from reconciler.daemon.promotion_operator import read
from reconciler.daemon.promotion_view import load, section, status_lines
from tests.daemon.harness import GitRemote
from tests.daemon.promotion_bed import Staging
from tests.daemon.test_promotion_loop import production, promote
from tests.daemon.test_promotion_testbed import write_repo

APPROVAL = "promotion:\n  production: {after: staging, soak: 8s, approval: required}\n"


def repo(tmp_path: Path, promotion: str = APPROVAL) -> GitRemote:
    beds = {n: types.SimpleNamespace(state_dir=tmp_path / n, subnet=s)
            for n, s in (("staging", "10.251.7"), ("production", "10.251.8"))}
    layout = write_repo(tmp_path / "layout", beds)
    (layout / "promotion.yaml").write_text(promotion)
    (tmp_path / "git").mkdir()
    return GitRemote.create(tmp_path / "git", layout)


def cli(loop: Reconciler, *args: str, ok: bool = True) -> str:
    """`reconciler promote ARGS --state-dir <production's>` as a user types it; its output."""
    result = CliRunner().invoke(main, ["promote", *args, "--state-dir", str(loop.config.state_path),
                                       "--who", "alice@login1"])
    assert (result.exit_code == 0) == ok, result.output
    return result.output


def soaked(staging: Staging, *commits: str) -> None:
    """Staging applied COMMITS 20 s apart (in order), the last 2 min ago, and stayed clean: each past the 8 s soak."""
    for offset, commit in enumerate(commits):
        note_applied(staging.store, commit, time.time() - 200 + 20 * offset)


def change(remote: GitRemote, what: str) -> str:
    return remote.commit(what, {"bases/common/patches.yaml": lambda t: t + f"# {what}\n"})


def applied(loop: Reconciler) -> str:
    target = promote(loop)
    assert target is not None
    loop.apply.mark_applied(target)
    return target.commit


def journal(loop: Reconciler) -> dict[str, Any]:
    return dict(loop.store.get(PROMOTION_KEY) or {})


def test_an_approval_names_one_commit_and_survives_a_restart(tmp_path: Path, staging: Staging) -> None:
    remote = repo(tmp_path)
    first = remote.head()
    soaked(staging, first)
    loop = production(tmp_path, remote, staging)
    assert promote(loop) is None  # staging passed it; nobody approved it
    held = journal(loop)
    assert held["reason"] == "approval-required" and held["holding"] == first
    assert f"reconciler promote approve {first[:12]} --cluster production" in held["message"]
    out = cli(loop, "approve", first[:10], "--cluster", "production", "--reason", "CAB-1")
    assert f"promote approve {first[:12]} --cluster production: approved" in out
    assert applied(loop) == first

    a, b = change(remote, "A"), change(remote, "B")
    soaked(staging, first, a, b)
    assert promote(loop).commit == first  # fetched now; passed by staging, approved by nobody
    cli(loop, "approve", a, "--cluster", "production")
    assert applied(loop) == a  # the approval of A does not let B through, though staging passed B too
    assert journal(loop)["holding"] == b and journal(loop)["reason"] == "approval-required"
    cli(loop, "approve", b, "--cluster", "production", "--reason", "CAB-2")
    loop.store.close()
    again = production(tmp_path, remote, staging)  # the approval is in the store: a restart keeps it
    assert applied(again) == b
    view = load(again.store)
    assert b in view["promotion_operator"]["approvals"]
    assert view["promotion_operator"]["approvals"][b]["who"] == "alice@login1"
    assert any(f"approved: {b[:12]} (alice@login1 at " in line and "CAB-2" in line for line in status_lines(view))
    assert "CAB-2" in section(view)

    # refused, nothing changed: the wrong cluster, a commit approved already, one the clone lacks, no hash
    before = read(again.store.path)
    assert "this daemon reconciles cluster production, not staging" in cli(again, "approve", b, "--cluster",
                                                                          "staging", ok=False)
    assert "is approved already (alice@login1" in cli(again, "approve", b, "--cluster", "production", ok=False)
    assert "not a commit of the daemon's clone" in cli(again, "approve", "1234567", "--cluster", "production",
                                                       ok=False)
    assert "not a commit hash" in cli(again, "approve", "HEAD~1", "--cluster", "production", ok=False)
    assert read(again.store.path) == before
    again.store.close()


def test_hold_release_and_going_back(tmp_path: Path, staging: Staging) -> None:
    remote = repo(tmp_path, "promotion:\n  production: {after: staging, soak: 8s}\n")
    first = remote.head()
    soaked(staging, first)
    loop = production(tmp_path, remote, staging)
    assert applied(loop) == first
    cli(loop, "hold", "--cluster", "production", "--reason", "change freeze")
    assert "held already (manual" in cli(loop, "hold", "--cluster", "production", ok=False)
    a = change(remote, "A")
    soaked(staging, first, a)
    kept = promote(loop)
    assert kept is not None and kept.commit == first  # held: drift of the applied commit is still healed
    assert journal(loop)["reason"] == "held" and journal(loop)["holding"] == a
    assert any(line.startswith("  HELD (by hand): alice@login1") and "change freeze" in line
               for line in status_lines(load(loop.store)))
    cli(loop, "release", "--cluster", "production")
    assert "not held" in cli(loop, "release", "--cluster", "production", ok=False)
    assert applied(loop) == a

    out = cli(loop, "back", "--cluster", "production", "--reason", "jobs slower")
    assert f"goes back from {a[:12]} to {first[:12]}" in out
    target = promote(loop)
    assert target is not None and target.commit == first and loop.promotion.trigger == "back"
    loop.apply.mark_applied(target)
    assert loop.store.rolled_back()[a]["gate"] == "operator"
    assert promote(loop).commit == first  # held on the commit it went back to
    lines = status_lines(load(loop.store))
    assert any(f"HELD (went back from {a[:12]} to {first[:12]})" in line and "jobs slower" in line for line in lines)
    cli(loop, "release", "--cluster", "production")
    # released: the commit it went back from stays rolled back here, though staging still passes it
    assert promote(loop).commit == first
    assert journal(loop)["holding"] == a and journal(loop)["reason"] == "rolled-back-here"
    b = change(remote, "B")
    soaked(staging, first, a, b)
    assert applied(loop) == b  # a newer commit is promoted the normal way
    loop.store.close()


def test_a_hotfix_while_staging_is_down_then_the_normal_way(tmp_path: Path, staging: Staging) -> None:
    remote = repo(tmp_path, "promotion:\n  production: {after: staging, soak: 8s}\n")
    first = remote.head()
    soaked(staging, first)
    loop = production(tmp_path, remote, staging)
    assert applied(loop) == first
    staging.down()
    fix = change(remote, "fix")
    assert promote(loop).commit == first and journal(loop)["reason"] == "upstream-unreachable"  # and fetched
    assert "needs --reason" in cli(loop, "hotfix", fix, "--cluster", "production", "--reason", " ", ok=False)
    cli(loop, "hotfix", fix, "--cluster", "production", "--reason", "GPU fan curve")
    target = promote(loop)
    assert target is not None and target.commit == fix and loop.promotion.trigger == "hotfix"
    assert journal(loop)["reason"] == "hotfix"
    loop.apply.mark_applied(target)
    row = read(loop.store.path)
    assert row["hotfix"] is None and row["hotfixes"][-1]["commit"] == fix
    assert any(f"hotfix: {fix[:12]} applied at" in line and "GPU fan curve" in line
               for line in status_lines(load(loop.store)))
    # an older commit is no hotfix: dropped with the reason, production stays
    cli(loop, "hotfix", first, "--cluster", "production", "--reason", "undo")
    assert promote(loop).commit == fix
    assert "older than the applied commit" in read(loop.store.path)["history"][-1]["effect"]
    staging.serve()
    nxt = change(remote, "next")
    soaked(staging, first, fix)
    assert promote(loop).commit == fix and journal(loop)["reason"] == "not-applied-upstream"
    soaked(staging, first, fix, nxt)
    assert applied(loop) == nxt
    loop.store.close()


def test_a_rollback_of_a_promoted_commit_holds_promotion(tmp_path: Path, staging: Staging) -> None:
    remote = repo(tmp_path, "promotion:\n  production: {after: staging, soak: 8s}\n")
    first = remote.head()
    soaked(staging, first)
    loop = production(tmp_path, remote, staging)
    assert applied(loop) == first
    bad, good = change(remote, "bad"), None
    soaked(staging, first, bad)
    assert promote(loop).commit == bad
    loop.store.mark_rolled_back(bad, {"gate": "smoke-job", "message": "job 7 failed on gpu01", "at": time.time()})
    good = change(remote, "good")
    soaked(staging, first, bad, good)
    assert promote(loop).commit == first  # held: staging passed `good`, but production's own gate failed
    row = read(loop.store.path)
    assert row["hold"]["kind"] == "rollback" and "gate smoke-job failed on" in row["hold"]["reason"]
    assert journal(loop)["reason"] == "held"
    assert any(f"HELD (after {bad[:12]} was rolled back)" in line for line in status_lines(load(loop.store)))
    cli(loop, "release", "--cluster", "production")
    assert applied(loop) == good
    loop.store.close()


def test_outside_the_promotion_windows_nothing_new_is_promoted(tmp_path: Path, staging: Staging) -> None:
    soon = datetime.now(UTC) + timedelta(hours=3)
    window = f'{{start: "{soon:%H}:00", end: "{(soon + timedelta(hours=1)):%H}:00"}}'
    remote = repo(tmp_path, f"promotion:\n  production: {{after: staging, soak: 8s, windows: [{window}]}}\n")
    first = remote.head()
    soaked(staging, first)
    loop = production(tmp_path, remote, staging)
    assert promote(loop) is None
    assert journal(loop)["reason"] == "outside-window" and "next opens" in journal(loop)["message"]
    loop.store.close()


def test_the_standby_of_a_pair_refuses_promotion_commands(tmp_path: Path) -> None:
    from reconciler.daemon.promotion_http import CLUSTER_KEY
    from reconciler.daemon.store import Store
    from reconciler.ha.role import HA_KEY

    store = Store(tmp_path / "state.db")
    store.set(CLUSTER_KEY, "production")
    store.set(HA_KEY, {"role": "standby", "leader": "login2"})
    result = CliRunner().invoke(main, ["promote", "hold", "--cluster", "production", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1 and "standby of a pair: give the command on the leader (login2)" in result.output
    assert read(store.path) == {}
    store.set(HA_KEY, {"role": "leader", "leader": "login1"})
    result = CliRunner().invoke(main, ["promote", "hold", "--cluster", "production", "--state-dir", str(tmp_path)])
    assert result.exit_code == 0 and read(store.path)["hold"]["kind"] == "manual", result.output
    store.close()


def test_the_gate_reads_the_row_without_the_write_lock_and_a_change_takes_it(tmp_path: Path) -> None:
    """While another writer holds the database (a check's results, the CLI), the gate's read of the row (each
    cycle) answers at once; a change waits for the lock and is made on the row as it stands then."""
    import sqlite3
    import threading

    from reconciler.daemon.promotion_http import CLUSTER_KEY
    from reconciler.daemon.promotion_operator import give, request, update
    from reconciler.daemon.store import Store

    store = Store(tmp_path / "state.db")
    store.set(CLUSTER_KEY, "production")
    give(store.path, request("approve", "a" * 40, "alice", "ok"), "production")
    writer = sqlite3.connect(str(store.path), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    assert set(update(store.path, lambda row, _: list(row.get("approvals") or {}))) == {"a" * 40}
    assert read(store.path)["approvals"]["a" * 40]["who"] == "alice"
    assert time.monotonic() - started < 5  # before this, each read waited for the writer (30 s, then failed)
    done: list[str] = []
    thread = threading.Thread(target=lambda: done.append(give(store.path, request("hold", None, "bob", "x"),
                                                              "production")))
    thread.start()
    time.sleep(0.5)
    assert not done  # the change waits for the lock
    writer.execute("INSERT OR REPLACE INTO meta VALUES ('promotion_operator', ?)",
                   ('{"approvals": {}, "history": []}',))
    writer.execute("COMMIT")
    thread.join(10)
    assert done and done[0].startswith("held:")
    row = read(store.path)
    assert row["hold"]["who"] == "bob" and row["approvals"] == {}  # made on the row the other writer left
    writer.close()
    store.close()


def test_a_hold_outlives_a_takeover_in_a_pair(tmp_path: Path) -> None:
    """The leader's promotion gate copies the operator's row beside the lease (the real lease script, run by a
    local shell); the successor adopts it when it takes over."""
    import contextlib

    from reconciler.daemon.leadership import take_over
    from reconciler.daemon.loop_promotion import Promotion
    from reconciler.daemon.loop_state import LoopState
    from reconciler.daemon.promotion_http import CLUSTER_KEY
    from reconciler.daemon.promotion_operator import give, request
    from reconciler.daemon.store import Store
    from reconciler.ha.role import HA_KEY, HighAvailability
    from tests.ha.local_shell import LocalShell, spec

    shell = LocalShell()

    @contextlib.contextmanager
    def connect() -> Any:
        yield shell, spec("ctl")

    stores = {name: Store(tmp_path / name / "state.db") for name in ("login1", "login2")}
    # A term of seconds: a 1 s term ran out under load before login1's mirror below (it mirrors only as leader)
    roles = {name: HighAvailability(name, "ctl", str(tmp_path / "lease"), 5.0, 1.0, connect) for name in stores}
    roles["login1"].tick()
    assert roles["login1"].is_leader()
    stores["login1"].set(CLUSTER_KEY, "production")
    stores["login1"].set(HA_KEY, roles["login1"].snapshot())
    give(stores["login1"].path, request("hold", None, "alice@login1", "freeze"), "production")
    common = types.SimpleNamespace(store=stores["login1"])
    Promotion(common, LoopState(), None, lambda _: None, None, lambda: roles["login1"])._mirror()  # type: ignore[arg-type]
    assert roles["login1"].is_leader()  # it mirrored as the leader (a follower's _mirror does nothing)
    lease = tmp_path / "lease" / "lease.json"  # login1 stops renewing: its term runs out (written, not waited for)
    lease.write_text(json.dumps({**json.loads(lease.read_text()), "expires": 0.0}))
    roles["login2"].tick()
    assert roles["login2"].is_leader()
    host = types.SimpleNamespace(store=stores["login2"], state=LoopState(), ha_loaded=None, sessions=None)
    take_over(host, roles["login2"])  # type: ignore[arg-type]
    adopted = read(stores["login2"].path)
    assert adopted["hold"]["kind"] == "manual" and adopted["hold"]["reason"] == "freeze"
    for store in stores.values():
        store.close()
