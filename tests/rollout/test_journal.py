"""The rollout journal's types and its one reader and writer (reconciler/rollout/journal.py): the round trip, the
journals written before it had a version (read as version 1), a newer or unparsable one refused with a message and
nothing changed, the upgrade states' transition table, and no other module reading the journal by its keys.

The version-1 fixtures are real journals, captured from the daemon's SQLite store (meta row `rollout_journal`) by
the code before this module existed (commit 162f1a9), on the testbed (Slurm 22.05):
- fixtures/journal_v1_upgrade.json: `test_daemon_killed_while_a_node_reboots_finishes_it_once[journal-rebooting]`
  (tests/rollout/test_upgrade_kill_testbed.py), the row copied byte for byte right after the kill: wave 1 applying,
  gpu01 rebooting with its undo journalled, gpu02-03 upgrade-required.
- fixtures/journal_v1_rolling_back.json: `test_sigkill_during_a_rollback_is_finished_on_the_next_start[rollback.
  before-apply]` (tests/rollout/test_rollout_testbed.py), the row as read right after the kill: rolling back the
  canary after its smoke-job gate failed.
- fixtures/journal_v1_restoring.json: `test_killed_during_a_first_commit_restore_the_restart_finishes_it[rollback.
  after-apply]` (tests/rollout/test_first_commit_restore_testbed.py): a first commit's restore under way (its
  before-image with the follow-ups, `restoring`).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.daemon.rollouts import StoreJournal
from reconciler.daemon.store import JOURNAL_KEY, Store
from reconciler.engine.before_image import BeforeImage
from reconciler.engine.followups import FollowUp
from reconciler.rollout import journal as J
from reconciler.rollout.journal import (
    TRANSITIONS,
    IllegalTransition,
    JournalRefused,
    MemoryJournal,
    NodeEntry,
    NodeWork,
    Phase,
    RolloutJournal,
    SeenBefore,
    SeenNode,
    UpgradeRecord,
    UpgradeState,
    decode,
    encode,
)
from tests.rollout.upgrade_sim import FileJournal, Sim

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
V1 = sorted(FIXTURES.glob("journal_v1_*.json"))
S = UpgradeState


def full() -> RolloutJournal:
    """A journal with every part set (what a rollout with an upgrade and no previous commit journals)."""
    record = RolloutJournal(commit="c" * 40, previous=None, waves={"mode": "progressive", "waves": [
        {"index": 1, "name": "canary", "nodes": ["gpu01"], "nodeset": "gpu01", "gated": True, "cluster": False,
         "why": ""}], "gates": ["smoke-job"], "soak_seconds": 2}, wave=0, phase=Phase.GATING,
        timeline=[{"wave": 1, "gates": [{"gate": "smoke-job", "ok": True}]}], started=1_900_000_000.5,
        before=SeenBefore(nodes={"gpu01": SeenNode(state="IDLE"), "gpu02": SeenNode(state="DRAIN", reason="fan")}),
        pending_followups=[FollowUp(node="gpu01", kind="restart", target="slurmd", phase=40)],
        before_image=BeforeImage(followups=[FollowUp(node="gpu01", kind="restart", target="slurmd", phase=40)]),
        failed_wave=1, failed_gate={"gate": "smoke-job", "ok": False}, restoring=True)
    up = record.upgrading()
    up.max_unavailable, up.failed = 2, ["gpu02"]
    up.nodes = {"gpu01": NodeEntry(state=S.REBOOTING, since=1.5, boot_id="b-1"),
                "gpu02": NodeEntry(state=S.FAILED, since=2.0, reason="gate gpu: XID 79", jobs=-1)}
    up.work = {"gpu01": NodeWork(needs="reboot", undo=["apt-get install x=1"], summary="x 1 -> 2"),
               "gpu02": NodeWork(needs="driver-reload", undo=[], failed=True)}
    return record


# ---------------------------------------------------------------- round trip


def test_a_journal_goes_through_json_and_back_unchanged() -> None:
    record = full()
    stored = json.loads(json.dumps(encode(record)))
    assert stored["version"] == J.VERSION == 2
    back = decode(stored, "test")
    assert back == record
    assert encode(back) == stored


def test_the_memory_and_store_journals_keep_what_was_saved(tmp_path: Path) -> None:
    memory = MemoryJournal()
    memory.save(full())
    assert memory.load() == full()
    memory.clear()
    assert memory.load() is None
    store = Store(tmp_path / "state.db")
    try:
        StoreJournal(store).save(full())
        assert StoreJournal(store).load() == full()
        assert store.get(JOURNAL_KEY) == encode(full())
    finally:
        store.close()


def test_empty_parts_are_left_out_as_before_the_version() -> None:
    """A key only said when it says something (pending_followups, before_image, restoring, failed...): the stored
    form stays the one the version-1 readers knew."""
    stored = encode(RolloutJournal(commit="c", waves={"waves": []}))
    assert set(stored) == {"version", "commit", "previous", "waves", "wave", "phase", "timeline", "started",
                           "before"}
    # an apply with no follow-ups journals an empty list (then drops it): kept as it was written
    assert encode(RolloutJournal(commit="c", pending_followups=[]))["pending_followups"] == []


# ---------------------------------------------------------------- version 1: journals written before the version


@pytest.mark.parametrize("path", V1, ids=[p.stem for p in V1])
def test_a_journal_without_a_version_is_read_as_version_1_and_written_back_the_same(path: Path) -> None:
    """Version 2 only adds keys: a version-1 journal written back is the same but for its version."""
    raw = json.loads(path.read_text())
    assert "version" not in raw
    record = decode(raw, str(path))
    assert record.version == 1
    assert encode(record) == {"version": 2, **raw}


def test_the_captured_upgrade_journal_reads_as_it_was() -> None:
    record = decode(json.loads((FIXTURES / "journal_v1_upgrade.json").read_text()), "fixture")
    assert (record.phase, record.wave, record.previous is not None) == (Phase.APPLYING, 0, True)
    assert [w.nodeset for w in record.wave_plan().waves] == ["gpu[01-03]"]
    assert record.upgrade is not None and record.upgrade.max_unavailable == 1
    assert {n: e.state for n, e in record.upgrade.nodes.items()} == {
        "gpu01": S.REBOOTING, "gpu02": S.REQUIRED, "gpu03": S.REQUIRED}
    assert record.mid_upgrade() == {"gpu01"}
    assert record.upgrade.work["gpu01"].needs == "reboot" and "550.127.05" in str(record.upgrade.work["gpu01"].undo)
    assert record.before.nodes["gpu01"].state == "IDLE"


def test_the_captured_rollback_journals_read_as_they_were() -> None:
    back = decode(json.loads((FIXTURES / "journal_v1_rolling_back.json").read_text()), "fixture")
    assert back.phase == Phase.ROLLING_BACK and back.failed_wave == 1
    assert (back.failed_gate or {}).get("gate") == "smoke-job"
    assert [w.name for w in back.wave_plan().waves] == ["canary", "step 1", "step 2"]
    restoring = decode(json.loads((FIXTURES / "journal_v1_restoring.json").read_text()), "fixture")
    assert restoring.restoring and restoring.previous is None and restoring.before_image is not None
    assert [(i.node, i.restore.missing) for i in restoring.before_image.items] == [("gpu01", None)]


def test_the_daemons_store_reads_an_unversioned_journal(tmp_path: Path) -> None:
    raw = json.loads((FIXTURES / "journal_v1_upgrade.json").read_text())
    store = Store(tmp_path / "state.db")
    try:
        store.set(JOURNAL_KEY, raw)
        record = StoreJournal(store).load()
        assert record is not None and record.version == 1 and record.commit == raw["commit"]
    finally:
        store.close()


# ---------------------------------------------------------------- refused: newer, unparsable


def refused(tmp_path: Path, raw: Any) -> tuple[str, Any]:
    """Store RAW as the daemon's journal, load it; the refusal's message and the row afterwards."""
    store = Store(tmp_path / "state.db")
    try:
        store.set(JOURNAL_KEY, raw)
        with pytest.raises(JournalRefused) as caught:
            StoreJournal(store).load()
        return str(caught.value), store.get(JOURNAL_KEY)
    finally:
        store.close()


def test_a_journal_of_a_newer_version_is_refused_naming_the_file_and_what_to_do(tmp_path: Path) -> None:
    raw = {**json.loads((FIXTURES / "journal_v1_upgrade.json").read_text()), "version": 3, "a_new_key": [1]}
    message, after = refused(tmp_path, raw)
    assert str(tmp_path / "state.db") in message and "rollout_journal" in message
    assert "version 3, written by a newer reconciler (this one reads up to version 2)" in message
    assert "finish the rollout with the release that wrote it" in message
    assert after == raw  # nothing changed


@pytest.mark.parametrize("raw,said", [
    ({"commit": "c", "upgrade": {"nodes": {"gpu01": {"state": "frobnicating"}}}}, "upgrade.nodes.gpu01.state"),
    ({"commit": "c", "phase": "applying", "wave": "two"}, "wave"),
    ({"commit": "c", "surprise": 1}, "surprise"),
    ({"commit": "c", "version": "1"}, "no valid version ('1')"),
    ({"commit": "c", "version": 0}, "no valid version (0)"),
    (["not", "a", "record"], "not a record (list)"),
], ids=["unknown-state", "bad-wave", "unknown-key", "version-text", "version-0", "a-list"])
def test_a_journal_that_does_not_parse_is_refused_naming_where_and_nothing_changes(tmp_path: Path, raw: Any,
                                                                                    said: str) -> None:
    message, after = refused(tmp_path, raw)
    assert message.startswith(f"{tmp_path / 'state.db'} (meta row 'rollout_journal'): the rollout journal ")
    assert said in message and "nothing was resumed or changed" in message and "Traceback" not in message
    assert after == raw


# ---------------------------------------------------------------- states and their transitions


def test_every_state_has_its_transitions_and_the_final_ones_lead_nowhere_but_a_rollback() -> None:
    assert set(TRANSITIONS) == set(UpgradeState)
    assert J.STATES[0] == "upgrade-required" and len(J.STATES) == len(UpgradeState)
    for final in (S.ROLLED_BACK, S.ROLLBACK_FAILED, S.SKIPPED):
        assert TRANSITIONS[final] == frozenset()
    assert TRANSITIONS[S.DONE] == frozenset({S.ROLLING_BACK})
    # the operator's retry (issue 46 item 4) is the one way out of failed but a rollback
    assert TRANSITIONS[S.FAILED] == frozenset({S.ROLLING_BACK, S.REQUIRED})
    assert S.SKIPPED in TRANSITIONS[S.REQUIRED] and S.SKIPPED in J.FINAL


@pytest.mark.parametrize("old,new", [(S.DONE, S.DRAINING), (S.REQUIRED, S.REBOOTING), (S.ROLLED_BACK, S.FAILED),
                                     (S.VALIDATING, S.APPLYING), (S.FAILED, S.DONE)])
def test_an_illegal_transition_is_refused_and_the_entry_stays(old: UpgradeState, new: UpgradeState) -> None:
    entry = NodeEntry(state=old, since=1.0)
    with pytest.raises(IllegalTransition) as caught:
        entry.move("gpu07", new)
    assert str(caught.value).startswith(f"upgrade: gpu07: {old.value} -> {new.value} is not a transition")
    assert (entry.state, entry.since) == (old, 1.0)


def test_the_machine_refuses_an_illegal_step_before_journalling_it(tmp_path: Path) -> None:
    """A machine asked to put a node that has not started straight into `done` raises, and no save says done."""
    sim = Sim(tmp_path, ["n1"])
    sim.create()
    journal = FileJournal(tmp_path / "journal.json")
    record = RolloutJournal(commit="c0ffee", upgrade=UpgradeRecord(nodes={"n1": NodeEntry(state=S.REQUIRED)}))
    machine = sim.machine({}, journal, record=record)
    with pytest.raises(IllegalTransition, match="upgrade-required -> done"):
        machine._set("n1", S.DONE)
    assert all(s.upgrade is None or s.upgrade.nodes["n1"].state != S.DONE for s in journal.saves)
    assert record.upgrade is not None and record.upgrade.nodes["n1"].state == S.REQUIRED


# ---------------------------------------------------------------- one reader: no module reads the journal's keys

# Journal keys that other records also carry, read there (never on the journal): the rollout's record
# (RolloutResult.as_dict) and its timeline and gate entries, the rollback's record (`before_image`: a restore), the
# events, the promotion and lease records, facts; and upgrade_view, which shows the stored upgrade part of the
# journal in flight (handed over by journal.glance) and of the ended rollout's record leniently, garbles included.
SHARED = frozenset({"commit", "previous", "waves", "wave", "timeline", "started", "failed_gate", "failed_wave",
                    "upgrade", "before_image", "error", "reason", "state", "since", "jobs", "nodes", "failed",
                    "summary", "max_unavailable", "version", "boot_id", "waiting", "reservation",
                    "reservation_start", "requeued"})


def key_reads(path: Path, keys: frozenset[str]) -> list[str]:
    """`x["key"]`, `x.get("key")`, `x.pop("key")`, `x.setdefault("key")` of KEYS in PATH."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
              and node.func.attr in ("get", "pop", "setdefault") and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        if isinstance(key, str) and key in keys:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {key!r}")
    return found


def journal_only() -> frozenset[str]:
    """The keys of the journal's stored form that no other record has."""
    keys: set[str] = set()
    for model in (RolloutJournal, UpgradeRecord, NodeEntry, NodeWork, SeenBefore, SeenNode):
        keys |= set(model.model_fields)
    return frozenset(keys - SHARED)


def test_no_module_but_the_journals_own_reads_the_journal_by_its_keys() -> None:
    only = journal_only()
    assert {"pending_followups", "restoring", "work", "undo", "needs", "before", "phase"} <= only
    roots = [REPO / "reconciler", REPO / "drivers", REPO / "checks"]
    journal_module = REPO / "reconciler" / "rollout" / "journal.py"
    reads = [hit for root in roots for path in sorted(root.rglob("*.py")) if path != journal_module
             for hit in key_reads(path, only)]
    assert reads == []
