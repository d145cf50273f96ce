"""The operator's commands (issue 46 item 4): requests in a real SQLite state database (daemon/operator.py), acted
on by the upgrade machine over a real local shell and the STAND-IN file cluster (tests/rollout/upgrade_sim.py);
bad input refused with nothing changed; the CLI; in a pair, a command given on the standby reaches the leader
through the lease node's flock'd script (run here by a real local shell)."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.daemon.loop_retry import retry_journal
from reconciler.daemon.operator import KEY, PairCarrier, Refused, StoreDesk, give
from reconciler.daemon.rollouts import StoreJournal
from reconciler.daemon.store import JOURNAL_KEY, Store
from reconciler.ha.role import HA_KEY, HighAvailability
from reconciler.rollout.admission import Admissions, OwnCount
from reconciler.rollout.journal import NodeEntry, RolloutJournal, UpgradeRecord, encode
from reconciler.rollout.journal import UpgradeState as S
from reconciler.rollout.operator import PauseAdmission, Request
from tests.ha.local_shell import LocalShell, spec
from tests.rollout.test_upgrade import BOUND, poll
from tests.rollout.upgrade_sim import NEW, OLD, REASON, Sim

NODES = ["n1", "n2", "n3"]


def ask(db: Path, op: str, node: str | None = None, reason: str = "", pair: bool = False) -> str:
    return give(db, Request(op, node, "alice", reason, 1_700_000_000.0), pair=pair)


def state(store: Store, node: str) -> str:
    return str(store.get(JOURNAL_KEY)["upgrade"]["nodes"][node]["state"])


def row(store: Store) -> dict[str, Any]:
    return dict(store.get(KEY) or {})


def machine_for(tmp_path: Path, store: Store, broken: tuple[str, ...] = ()) -> tuple[Sim, Any]:
    sim = Sim(tmp_path / "sim", NODES)
    sim.create(broken)
    desk = StoreDesk(store.path)
    machine = sim.machine({"max_unavailable": 1, "failure_budget": 1}, StoreJournal(store),  # type: ignore[arg-type]
                          admission=Admissions([PauseAdmission(desk), OwnCount(1)]), operator=desk)
    return sim, machine


def test_pause_holds_new_nodes_the_one_in_flight_finishes_resume_goes_on(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    sim, machine = machine_for(tmp_path, store)
    for node in NODES:
        (sim.dir(node) / "jobs").write_text("4711\n")
    thread = threading.Thread(target=machine.run, args=(NODES,))
    thread.start()
    poll("n1 in flight", lambda: store.get(JOURNAL_KEY) is not None and state(store, "n1") == "waiting-for-jobs")
    assert "paused" in ask(store.path, "pause", reason="switch firmware")
    poll("the pause journalled", lambda: (store.get(JOURNAL_KEY)["upgrade"].get("waiting") or {}).get("kind")
         == "hold")
    waiting = store.get(JOURNAL_KEY)["upgrade"]["waiting"]
    assert waiting["why"].startswith("paused by the operator (alice: switch firmware) at ")
    for node in NODES:
        (sim.dir(node) / "jobs").write_text("")
    poll("n1 done", lambda: state(store, "n1") == "done")
    threading.Event().wait(0.5)  # ten polls of the machine: nothing new starts while paused
    assert state(store, "n2") == state(store, "n3") == "upgrade-required"
    assert "resumed" in ask(store.path, "resume")
    thread.join(BOUND)
    assert not thread.is_alive()
    assert [sim.read(n, "loaded") for n in NODES] == [NEW, NEW, NEW]
    assert [h["op"] for h in row(store)["history"]] == ["pause", "resume"]


def test_skip_leaves_a_node_not_started_on_the_old_version_reported_skipped(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    sim, machine = machine_for(tmp_path, store)
    ask(store.path, "pause")
    thread = threading.Thread(target=machine.run, args=(NODES,))
    thread.start()
    poll("held", lambda: store.get(JOURNAL_KEY) is not None
         and (store.get(JOURNAL_KEY)["upgrade"].get("waiting") or {}).get("kind") == "hold")
    assert "skipped" in ask(store.path, "skip", "n2", reason="vendor ticket 42")
    poll("n2 skipped", lambda: state(store, "n2") == "skipped")
    ask(store.path, "resume")
    thread.join(BOUND)
    assert sim.read("n2", "loaded") == OLD and sim.read("n2", "version") == OLD and not sim.read("n2", "drained")
    assert sim.read("n1", "loaded") == sim.read("n3", "loaded") == NEW
    journal = store.get(JOURNAL_KEY)["upgrade"]
    assert journal["nodes"]["n2"]["reason"] == "skipped by the operator (alice: vendor ticket 42)"
    assert [(a["op"], a["node"], a["effect"]) for a in journal["operator"]] == [
        ("skip", "n2", "skipped: left on the old version")]
    assert "n2" not in row(store).get("skip", {})  # acted on: out of the standing requests, in the history
    with pytest.raises(Refused, match="n2 is skipped: only a node not yet started can be skipped"):
        ask(store.path, "skip", "n2")


def test_retry_puts_a_failed_node_through_again_out_of_the_failure_count(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    sim, machine = machine_for(tmp_path, store, broken=("n3",))
    first = machine.run(NODES)
    assert sorted(first.done) == ["n1", "n2"] and list(first.failed) == ["n3"]
    assert sim.read("n3", "drained").startswith(REASON + " failed: gpu gate")
    assert store.get(JOURNAL_KEY)["upgrade"]["failed"] == ["n3"]
    (sim.dir("n3") / "broken").unlink()  # fixed by a human
    assert "again" in ask(store.path, "retry", "n3")
    # the next pass (the daemon's, after a restart: a new machine reads the same) holds no change for n3: its new
    # driver went in before its gate failed; the machine takes it because of the retry
    assert sim.read("n3", "version") == NEW
    outcome = machine.run(["n1", "n2"])
    assert outcome.done and "n3" in outcome.done and not outcome.failed
    assert state(store, "n3") == "done" and store.get(JOURNAL_KEY)["upgrade"]["failed"] == []
    assert sim.read("n3", "loaded") == NEW and not sim.read("n3", "drained")  # its own drain: resumed


def journal_with(store: Store, states: dict[str, S]) -> None:
    upgrade = UpgradeRecord(nodes={n: NodeEntry(state=s) for n, s in states.items()})
    store.set(JOURNAL_KEY, encode(RolloutJournal(commit="c0ffee", upgrade=upgrade)))


@pytest.mark.parametrize("op,node,said", [
    ("skip", "n9", "n9 is not a node of the upgrade in flight (its nodes: n1, n2, n3)"),
    ("retry", "n1", "n1 is done, not failed: only a failed node can be retried"),
    ("skip", "n1", "n1 is done: only a node not yet started can be skipped"),
    ("skip", "n2", "n2 is draining: only a node not yet started can be skipped (a node in flight finishes"),
    ("resume", None, "not paused: nothing to resume"),
])
def test_bad_input_is_refused_and_changes_nothing(tmp_path: Path, op: str, node: str | None, said: str) -> None:
    store = Store(tmp_path / "state.db")
    journal_with(store, {"n1": S.DONE, "n2": S.DRAINING, "n3": S.FAILED})
    before = (store.get(KEY), store.get(JOURNAL_KEY))
    with pytest.raises(Refused) as caught:
        ask(store.path, op, node)
    assert said in str(caught.value)
    assert (store.get(KEY), store.get(JOURNAL_KEY)) == before


@pytest.mark.parametrize("reason,said", [("x" * 201, "got 201 characters"),
                                         ("two\nlines", "got 9 characters, with a control character")])
def test_a_reason_too_long_or_of_several_lines_is_refused(tmp_path: Path, reason: str, said: str) -> None:
    store = Store(tmp_path / "state.db")
    with pytest.raises(Refused, match="--reason must be one printable line of at most 200 characters") as caught:
        ask(store.path, "pause", reason=reason)
    assert said in str(caught.value) and store.get(KEY) is None


def test_skip_and_retry_without_an_upgrade_in_flight_are_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    with pytest.raises(Refused, match="no upgrade in flight: no node to skip"):
        ask(store.path, "skip", "n1")
    with pytest.raises(Refused, match="no upgrade in flight, and n1 did not fail in the last one"):
        ask(store.path, "retry", "n1")
    assert store.get(KEY) is None


def test_a_retry_after_the_rollout_ended_stands_for_a_node_that_failed_in_it_and_becomes_a_retry_rollout(
        tmp_path: Path) -> None:
    """With no rollout in flight, `retry` is checked against the last rollout's record: a node that failed there
    is asked (once); the daemon's next cycle turns it into a rollout journal of its own (loop_retry.py): one wave
    `retry` of that node for the applied commit, the node journalled failed with its reason."""
    store = Store(tmp_path / "state.db")
    store.record_rollout("r1", {"commit": "c0ffee", "status": "complete", "upgrade": {
        "nodes": {"n1": {"state": "failed", "reason": "gpu gate: xid 79"}, "n2": {"state": "done"}},
        "failed": ["n1"]}}, 1.0)
    with pytest.raises(Refused, match=r"n2 did not fail in the last one \(failed there: n1\)"):
        ask(store.path, "retry", "n2")
    assert ask(store.path, "retry", "n1").startswith("asked: no upgrade is in flight; the daemon's next cycle")
    with pytest.raises(Refused, match="n1: a retry is already asked"):
        ask(store.path, "retry", "n1")
    assert retry_journal(store, None) is None  # nothing applied: nothing to retry against
    journal = retry_journal(store, "c0ffee")
    assert journal is not None and journal.commit == "c0ffee"
    assert [(w.name, w.nodes, w.gated) for w in journal.wave_plan().waves] == [("retry", ["n1"], False)]
    assert journal.upgrade is not None and journal.upgrade.failed == ["n1"]
    assert (journal.upgrade.nodes["n1"].state, journal.upgrade.nodes["n1"].reason) == (S.FAILED, "gpu gate: xid 79")
    StoreDesk(store.path).acted("retry", "n1", "retried: through the machine again")
    assert retry_journal(store, "c0ffee") is None  # acted on: no second retry rollout


def test_the_cli_gives_the_command_and_refuses_bad_input_with_exit_1(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    journal_with(store, {"n1": S.REQUIRED, "n3": S.FAILED})
    runner = CliRunner()
    out = runner.invoke(main, ["upgrade", "skip", "n1", "--state-dir", str(tmp_path), "--who", "bob",
                               "--reason", "rma"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("upgrade skip n1: asked: the daemon leaves it on the old version")
    assert row(store)["skip"]["n1"]["who"] == "bob" and row(store)["skip"]["n1"]["reason"] == "rma"
    out = runner.invoke(main, ["upgrade", "retry", "n1", "--state-dir", str(tmp_path)])
    assert out.exit_code == 1
    assert "upgrade retry n1 refused: n1 is upgrade-required, not failed" in out.output
    assert "(nothing changed)" in out.output and "Traceback" not in out.output
    assert "retry" not in row(store)


def lease_pair(tmp_path: Path) -> tuple[HighAvailability, HighAvailability, Store, Store]:
    """Two daemons' HA roles over one lease directory, run by a real local shell (the lease node's script)."""
    shell = LocalShell()
    lease_dir = str(tmp_path / "lease")
    stores = []
    roles = []
    for name in ("login1", "login2"):
        store = Store(tmp_path / name / "state.db")
        store.set(HA_KEY, {"name": name})
        @contextlib.contextmanager
        def connect() -> Any:
            yield shell, spec("ctl")
        roles.append(HighAvailability(name, "ctl", lease_dir, 30.0, 1.0, connect,
                                      operator=PairCarrier(store.path)))
        stores.append(store)
    return roles[0], roles[1], stores[0], stores[1]


def test_a_command_given_on_the_standby_reaches_the_leader_through_the_lease_node(tmp_path: Path) -> None:
    leader, standby, leader_store, standby_store = lease_pair(tmp_path)
    leader.tick()
    standby.tick()
    assert leader.is_leader() and not standby.is_leader()
    journal_with(leader_store, {"n1": S.REQUIRED, "n2": S.FAILED})
    said = ask(standby_store.path, "skip", "n1", reason="rma", pair=True)
    assert said.startswith("queued for the leader")
    assert row(standby_store)["outbox"][0]["node"] == "n1" and "skip" not in row(leader_store)
    standby.tick()  # carried to the lease node
    assert row(standby_store)["outbox"] == []
    waiting = json.loads((tmp_path / "lease" / "operator.json").read_text())
    assert [(r["op"], r["node"]) for r in waiting] == [("skip", "n1")]
    ask(standby_store.path, "retry", "n1", pair=True)  # refused by the leader: n1 did not fail
    standby.tick()
    leader.tick()  # the leader's renewal takes both, each checked against its journal
    assert json.loads((tmp_path / "lease" / "operator.json").read_text()) == []
    taken = row(leader_store)
    assert taken["skip"]["n1"]["who"] == "alice" and taken["skip"]["n1"]["reason"] == "rma"
    assert "n1" not in taken.get("retry", {})
    assert taken["history"][-1]["effect"].startswith("refused: n1 is upgrade-required, not failed")
    assert StoreDesk(leader_store.path).requests().skip["n1"].by() == "alice: rma"


def test_status_json_and_the_page_show_the_pause_the_requests_and_a_skipped_node(tmp_path: Path) -> None:
    from reconciler.daemon.status_page import load_snapshot, render
    from reconciler.daemon.upgrade_view import load as upgrade_load
    from reconciler.daemon.upgrade_view import metric_series

    store = Store(tmp_path / "state.db")
    journal_with(store, {"n1": S.REQUIRED, "n2": S.REQUIRED, "n3": S.FAILED})
    ask(store.path, "pause", reason="switch firmware")
    ask(store.path, "skip", "n1", reason="rma")
    StoreDesk(store.path).acted("skip", "n1", "skipped: left on the old version")
    record = store.get(JOURNAL_KEY)
    record["upgrade"]["nodes"]["n1"].update(state="skipped", reason="skipped by the operator (alice: rma)")
    store.set(JOURNAL_KEY, record)
    ask(store.path, "retry", "n3")
    runner = CliRunner()
    out = runner.invoke(main, ["status", "--state-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "upgrade:        PAUSED: paused by the operator (alice: switch firmware) at " in out.output
    assert "operator asked: retry n3 (alice), not yet acted on" in out.output
    assert "operator skip n1 (alice: rma) " in out.output and ": skipped: left on the old version" in out.output
    assert "skipped by the operator (alice: rma)" in out.output  # the node's state line (upgrade_view)
    data = json.loads(runner.invoke(main, ["status", "--state-dir", str(tmp_path), "--format", "json"]).output)
    assert data["upgrade_operator"]["paused"]["reason"] == "switch firmware"
    assert [(a["op"], a["node"]) for a in data["upgrade_operator"]["asked"]] == [("retry", "n3")]
    page = render(load_snapshot(store.path))
    assert "paused by the operator (alice: switch firmware)" in page and "operator asked: retry n3" in page
    series = metric_series(upgrade_load(store.path))  # reconciler_node_upgrade_state: a state of the set
    assert series[("n1", "skipped")] == 1 and series[("n2", "skipped")] == 0
