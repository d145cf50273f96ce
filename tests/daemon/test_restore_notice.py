"""A daemon's first commit (no applied commit to go back to) that fails its gate gets its nodes restored to the
before-images (reconciler/engine/restore.py): `reconciler status`, `history`, the status page and the notification
(real Apprise to a local json:// receiver) say what was restored and what was not, never "rolled back to -"."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop import Reconciler, Target
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.status_page import load_snapshot, render
from reconciler.daemon.store import Store
from reconciler.desired.loader import load_dir
from reconciler.engine.restore import RestoreReport
from reconciler.engine.workload import GateResult
from reconciler.rollout.rollback_text import rollback_lines
from reconciler.rollout.runner import RolloutResult
from reconciler.rollout.waves import Wave, WavePlan
from tests.daemon.test_notify import REPO, Receiver, sent

COMMIT = "abc123def4567890" + "0" * 24
PROLOG = "/etc/slurm/prolog.sh back to its 18 bytes before the apply, mode 0755 root:root"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.server.shutdown()


def first_commit_result(report: RestoreReport, resumed: list[str]) -> dict[str, Any]:
    """RolloutResult.as_dict of a first commit whose canary gate failed, as the runner's `_restore` records it."""
    waves = WavePlan([Wave(1, "canary", ["gpu01", "gpu02"]), Wave(2, "rest", ["gpu03", "gpu04"])],
                     gates=["smoke-job"])
    gate = GateResult("smoke-job", False, "gpu01: Prolog error", ["gpu01", "gpu02"])
    errors = [f"{n}: not restored: {m}" for n, ms in sorted(report.not_restored.items()) for m in ms]
    rollback = {"ok": report.ok, "nodes": "gpu[01-02]", "to": None, "before_image": True, **report.as_dict(),
                "changes": sum(len(v) for v in report.restored.values()), "resumed": resumed, "errors": errors,
                "started": 1.0, "ended": 2.0}
    result = RolloutResult("rolled-back" if report.ok else "rollback-failed", COMMIT, None, waves, failed_wave=1,
                           failed_gate=gate.as_dict(), rollback=rollback)
    return result.as_dict()


def all_restored() -> RestoreReport:
    report = RestoreReport()
    report.note(report.restored, "gpu01", PROLOG)
    report.note(report.unchanged, "gpu02", "patch prolog")
    return report


def partly_restored() -> RestoreReport:
    report = all_restored()
    report.note(report.not_restored, "gpu02", "service chronyd: gpu02 unreachable (not reached)")
    return report


def reconciler_for(tmp_path: Path, receiver: Receiver) -> Reconciler:
    cfg = DaemonConfig.model_validate({"watch": str(tmp_path / "desired"), "mode": "enforce", "metrics_listen": None,
                                       "state_dir": str(tmp_path / "state"),
                                       "notifications": {"targets": [{"url": receiver.url()}]}})
    cfg.state_path.mkdir(parents=True, exist_ok=True)
    return Reconciler(cfg, Store(cfg.state_path / "state.db"), Metrics(), threading.Event(), config_dir=tmp_path)


@pytest.mark.parametrize("complete", [True, False])
def test_first_commit_restore_notification_names_what_was_restored(tmp_path: Path, receiver: Receiver,
                                                                   complete: bool) -> None:
    rec = reconciler_for(tmp_path, receiver)
    target = Target(commit=COMMIT, subject="prolog that fails", loaded=load_dir(REPO / "desired-state"))
    data = first_commit_result(all_restored() if complete else partly_restored(), ["gpu01"])
    rec.apply.rollout_event("rolled-back", data, target)
    sent(rec.notices.notifier)  # type: ignore[arg-type]
    (message,) = receiver.messages
    body = message["message"]
    if complete:
        assert message["title"] == "reconciler: commit abc123def456 failed; nodes restored to the state before it"
        assert ("restored gpu[01-02] to the state found before the apply (before-images; no earlier commit to go "
                "back to)") in body, body
        assert "NOT restored" not in body, body
    else:
        assert message["title"] == ("reconciler: commit abc123def456 failed; restore to the state before it "
                                    "INCOMPLETE")
        assert ("restore of gpu[01-02] to the state found before the apply (before-images) INCOMPLETE: 1 "
                "resource(s) not restored on gpu02") in body, body
        assert "NOT restored:\n  gpu02: service chronyd: gpu02 unreachable (not reached)" in body, body
    assert f"restored to the state the apply found (no earlier commit to go back to):\n  gpu01: {PROLOG}\n" \
           "  gpu01: resumed (drained during the rollout)" in body, body
    assert "already as before (the change never landed there):\n  gpu02: patch prolog" in body, body
    assert "Gate smoke-job failed in wave 1 on gpu[01-02]: gpu01: Prolog error" in body, body
    assert "Drains resumed: gpu01" in body, body
    assert "put back on" not in body and " to -" not in body and " on ?" not in body, body
    assert "rolled back" not in message["title"] + body, body


def test_a_long_restore_is_cut_in_the_message_and_says_how_much_more(tmp_path: Path, receiver: Receiver) -> None:
    report = RestoreReport()
    for i in range(1, 31):
        report.note(report.restored, f"gpu{i:02d}", PROLOG)
    rec = reconciler_for(tmp_path, receiver)
    target = Target(commit=COMMIT, subject=None, loaded=load_dir(REPO / "desired-state"))
    rec.apply.rollout_event("rolled-back", first_commit_result(report, []), target)
    sent(rec.notices.notifier)  # type: ignore[arg-type]
    body = receiver.messages[0]["message"]
    assert f"gpu14: {PROLOG}" in body and f"gpu15: {PROLOG}" not in body, body
    assert "... and 16 more line(s): `reconciler rollout status`" in body, body


def stored(tmp_path: Path, data: dict[str, Any]) -> Path:
    """A daemon state directory whose one run rolled out DATA (a real SQLite store)."""
    state = tmp_path / "state"
    state.mkdir()
    store = Store(state / "state.db")
    try:
        store.start_run("run1", "poll", "enforce", COMMIT, "prolog that fails")
        store.record_rollout("run1", data, 1.0)
        store.finish_run("run1", "rolled-back")
    finally:
        store.close()
    return state


def test_status_and_history_say_restored_to_the_state_before_not_rolled_back_to_a_commit(tmp_path: Path) -> None:
    state = stored(tmp_path, first_commit_result(partly_restored(), ["gpu01"]))
    status = CliRunner().invoke(main, ["status", "--state-dir", str(state)])
    assert status.exit_code == 0, status.output
    assert ("  restore of gpu[01-02] to the state found before the apply (before-images) INCOMPLETE: 1 resource(s) "
            "not restored on gpu02\n"
            "    restored to the state the apply found (no earlier commit to go back to):\n"
            f"      gpu01: {PROLOG}\n"
            "      gpu01: resumed (drained during the rollout)\n"
            "    already as before (the change never landed there):\n"
            "      gpu02: patch prolog\n"
            "    NOT restored:\n"
            "      gpu02: service chronyd: gpu02 unreachable (not reached)\n") in status.output, status.output
    assert "rolled back gpu" not in status.output and " to -" not in status.output, status.output
    history = CliRunner().invoke(main, ["history", "--state-dir", str(state)])
    assert history.exit_code == 0, history.output
    assert "restore of gpu[01-02] to the state found before the apply (before-images) INCOMPLETE" in history.output
    assert "rollback of" not in history.output and " to -" not in history.output, history.output


def test_status_page_shows_the_restore_not_a_commit_it_went_back_to(tmp_path: Path) -> None:
    state = stored(tmp_path, first_commit_result(all_restored(), ["gpu01"]))
    page = render(load_snapshot(state / "state.db"))
    assert ("restored gpu[01-02] to the state found before the apply (before-images; no earlier commit to go back "
            "to)") in page, page
    assert "gpu01: /etc/slurm/prolog.sh back to its 18 bytes" in page
    assert "Rolled back <code>" not in page


def test_after_a_restart_a_resource_found_as_before_is_not_said_to_be_one_the_change_never_reached() -> None:
    rollback = first_commit_result(all_restored(), [])["rollback"]
    assert "already as before (the change never landed there):" in rollback_lines(rollback)
    again = rollback_lines({**rollback, "after_restart": True})  # a killed daemon may have restored it already
    assert "already as before (restored before a restart, or the change never landed there):" in again, again
    assert not any("(the change never landed there)" in line for line in again), again
