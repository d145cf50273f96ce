"""Promotion between clusters: the decision (pure, from recorded /promotion.json answers), its journal in real SQLite
across a restart, the answer a daemon builds from its own store, and that answer over the real HTTP listener."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reconciler.checks import store as check_store
from reconciler.checks.results import CheckResult
from reconciler.cli.main import main
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.promotion import (
    NOT_APPLIED,
    ROLLED_BACK,
    SOAKING,
    UNCHECKED,
    UNHEALTHY,
    UNREACHABLE,
    decide,
    journal,
    parse_upstream,
)
from reconciler.daemon.promotion_http import (
    PROMOTION_KEY,
    answer,
    answer_json,
    fetch,
    note_applied,
    note_promoted,
)
from reconciler.daemon.promotion_view import load, section, status_lines
from reconciler.daemon.store import Store
from tests.transport.sshd_server import free_port

A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)  # production's branch: D (head) <- C <- B <- A
LINEAGE = [D, C, B, A]
SOAK = 600.0


def recorded(applied: dict[str, dict[str, Any]], now: float = 10_000.0, **extra: Any) -> dict[str, Any]:
    """A /promotion.json answer as staging's daemon gives it."""
    current = max(applied, key=lambda c: applied[c]["applied_at"]) if applied else None
    return {"cluster": "staging", "now": now, "applied_commit": current, "applied": applied, "rolled_back": {},
            "failing": [], **extra}


def run(answer_data: dict[str, Any] | None, head: str = D, applied: str | None = A,
        unreachable: str | None = None, rejected: dict[str, Any] | None = None) -> Any:
    upstream = parse_upstream(answer_data) if answer_data is not None else None
    return decide(head, applied, LINEAGE, upstream, SOAK, after="staging", unreachable=unreachable,
                  rejected=rejected)


def test_not_yet_applied_upstream_waits() -> None:
    decision = run(recorded({A: {"applied_at": 1000.0, "until": None, "clean_since": 1000.0}}))
    assert decision.apply is None and decision.holding == D and decision.reason == NOT_APPLIED
    assert "waiting for staging to apply it" in decision.message and A[:12] in decision.message


def test_applied_and_healthy_but_soak_not_over_waits_with_the_time_left() -> None:
    decision = run(recorded({D: {"applied_at": 9_800.0, "until": None, "clean_since": 9_800.0}}))
    assert decision.apply is None and decision.holding == D and decision.reason == SOAKING
    assert decision.remaining == pytest.approx(400.0)
    assert "400s of 600s left" in decision.message


def test_soak_over_promotes_the_head() -> None:
    decision = run(recorded({D: {"applied_at": 9_000.0, "until": None, "clean_since": 9_000.0}}))
    assert decision.apply == D and decision.holding is None and decision.reason == ""
    assert decision.upstream_applied_at == 9_000.0


def test_a_check_failing_upstream_holds_and_a_late_recovery_restarts_the_soak() -> None:
    failing = recorded({D: {"applied_at": 1_000.0, "until": None, "clean_since": None}}, failing=["gpu on n1: xid"])
    decision = run(failing)
    assert decision.apply is None and decision.reason == UNHEALTHY and "gpu on n1: xid" in decision.message
    recovered = recorded({D: {"applied_at": 1_000.0, "until": None, "clean_since": 9_900.0}})
    decision = run(recovered)
    assert decision.apply is None and decision.reason == SOAKING and decision.remaining == pytest.approx(500.0)


def test_rolled_back_upstream_is_never_promoted_but_a_newer_good_commit_is() -> None:
    rolled = {C: {"gate": "smoke-job", "message": "job 12 failed", "at": 5_000.0}}
    answer_data = recorded({B: {"applied_at": 1_000.0, "until": None, "clean_since": 1_000.0}}, rolled_back=rolled)
    decision = run(answer_data, head=C)
    # C is held back for good; B (older, soaked, on the branch) is applied meanwhile
    assert decision.holding == C and decision.reason == ROLLED_BACK and decision.apply == B
    assert "staging rolled it back (gate smoke-job: job 12 failed)" in decision.message
    # even long after, and even when staging no longer reports it, C stays held (production's own memory)
    later = recorded({B: {"applied_at": 1_000.0, "until": None, "clean_since": 1_000.0}}, now=99_000.0)
    assert run(later, head=C, applied=B, rejected=rolled).reason == ROLLED_BACK
    # D, a fix after C, applied and soaked on staging: promoted
    fixed = recorded({B: {"applied_at": 1_000.0, "until": 8_000.0, "clean_since": 1_000.0},
                      D: {"applied_at": 8_000.0, "until": None, "clean_since": 8_000.0}}, rolled_back=rolled)
    decision = run(fixed, head=D, applied=B, rejected=rolled)
    assert decision.apply == D and decision.holding is None


def test_unreachable_upstream_waits_and_the_journal_says_since_when() -> None:
    decision = run(None, unreachable="ConnectionRefusedError: [Errno 111] Connection refused")
    assert decision.apply is None and decision.holding == D and decision.reason == UNREACHABLE
    assert "did not answer" in decision.message and "Connection refused" in decision.message
    first = journal(None, decision, after="staging", source="http://s:9464", unreachable="refused", now=100.0)
    second = journal(first, decision, after="staging", source="http://s:9464", unreachable="refused", now=160.0)
    assert second["unreachable_since"] == 100.0 and second["since"] == 100.0 and second["checked_at"] == 160.0
    back = journal(second, run(recorded({})), after="staging", source="http://s:9464", unreachable=None, now=200.0)
    assert back["unreachable_since"] is None and back["reason"] == NOT_APPLIED and back["since"] == 200.0


def test_a_commit_applied_upstream_but_not_on_this_branch_is_not_promoted() -> None:
    elsewhere = "e" * 40  # e.g. staging follows another branch, or a force-push dropped it from ours
    answer_data = recorded({elsewhere: {"applied_at": 1_000.0, "until": None, "clean_since": 1_000.0}})
    decision = run(answer_data)
    assert decision.apply is None and decision.holding == D and decision.reason == NOT_APPLIED


def test_an_older_soaked_commit_is_applied_while_the_head_soaks() -> None:
    answer_data = recorded({B: {"applied_at": 1_000.0, "until": 9_500.0, "clean_since": 1_000.0},
                            D: {"applied_at": 9_500.0, "until": None, "clean_since": 9_500.0}})
    decision = run(answer_data)
    assert decision.apply == B and decision.holding == D and decision.reason == SOAKING
    assert decision.upstream_applied_at == 1_000.0


def test_malformed_answers_are_refused() -> None:
    for bad in ({}, {"cluster": "staging"}, {"cluster": "staging", "now": 1, "applied": {A: {}}}, []):
        with pytest.raises(ValueError):
            parse_upstream(bad)


def test_a_restart_keeps_the_hold_reason_and_its_start(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = Store(db)
    soaking = run(recorded({D: {"applied_at": 9_800.0, "until": None, "clean_since": 9_800.0}}))
    store.set(PROMOTION_KEY, journal(None, soaking, after="staging", source="http://s:9464", unreachable=None,
                                     now=500.0))
    store.set("cluster", "production")
    store.close()
    reopened = Store(db)  # the daemon restarted: its first decision continues the journalled one
    previous = reopened.get(PROMOTION_KEY)
    assert previous["holding"] == D and previous["reason"] == SOAKING
    again = run(recorded({D: {"applied_at": 9_800.0, "until": None, "clean_since": 9_800.0}}, now=9_900.0))
    record = journal(previous, again, after="staging", source="http://s:9464", unreachable=None, now=700.0)
    assert record["since"] == 500.0 and record["remaining"] == pytest.approx(500.0)
    reopened.set(PROMOTION_KEY, record)
    lines = "\n".join(status_lines(load(reopened)))
    assert "cluster:        production" in lines
    assert f"holding {D[:12]} since 1970-01-01 00:08:20 UTC: soaking on staging: 500s of 600s left" in lines
    reopened.close()


def _check(ok: bool, at: float, node: str = "n1") -> CheckResult:
    return CheckResult(check="gpu-health", kind="node", node=node, ok=ok, message="ok" if ok else "xid 79",
                       started=datetime.fromtimestamp(at, UTC), duration=1.0)


def test_the_answer_comes_from_the_store_applied_log_rollbacks_and_checks(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    note_applied(store, B, 1_000.0)
    note_applied(store, B, 1_500.0)  # a drift check of the same commit is not a new apply
    note_applied(store, D, 2_000.0)
    store.mark_rolled_back(C, {"gate": "smoke-job", "message": "job failed", "at": 1_800.0, "nodes": "n1"})
    check_store.record_many(store.conn, [_check(True, 900.0), _check(False, 1_200.0), _check(True, 1_300.0),
                                         _check(True, 2_100.0)])
    data = answer(store, "staging", now=3_000.0)
    assert data["applied"] == {
        B: {"applied_at": 1_000.0, "until": 2_000.0, "clean_since": 1_300.0, "checks": False, "checked": True},
        D: {"applied_at": 2_000.0, "until": None, "clean_since": 2_000.0, "checks": False, "checked": True}}
    assert data["rolled_back"][C]["gate"] == "smoke-job" and data["failing"] == []
    upstream = parse_upstream(json.loads(json.dumps(data)))
    assert decide(D, A, LINEAGE, upstream, 900.0, after="staging").apply == D  # 1000s clean since 2000
    assert decide(D, A, LINEAGE, upstream, 1_200.0, after="staging").reason == SOAKING
    check_store.record_many(store.conn, [_check(False, 2_500.0)])
    data = answer(store, "staging", now=3_000.0)
    assert data["applied"][D]["clean_since"] is None and data["failing"] == ["gpu-health on n1: xid 79"]
    assert decide(D, A, LINEAGE, parse_upstream(data), 10.0, after="staging").reason == UNHEALTHY
    store.close()


def test_the_answer_travels_over_the_real_listener(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = Store(db)
    note_applied(store, D, 1_000.0)
    store.close()
    port = free_port()
    server = Metrics().serve(f"127.0.0.1:{port}", None, None, None, lambda: answer_json(db, "staging"))
    try:
        upstream = fetch(f"http://127.0.0.1:{port}")
    finally:
        server.shutdown()
    assert upstream.cluster == "staging" and upstream.applied[D].applied_at == 1_000.0
    with pytest.raises(OSError):
        fetch(f"http://127.0.0.1:{free_port()}", timeout=2.0)


def test_promoted_lag_and_page_section(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.set("cluster", "production")
    note_promoted(store, D, 1_000.0, 1_012.5)
    note_promoted(store, D, 1_000.0, 1_100.0)  # the same commit again (drift check): kept once
    data = load(store)
    assert [e["seconds"] for e in data["promoted"]] == [12.5]
    assert "applied 12.5s after the earlier cluster" in "\n".join(status_lines(data))
    page = section(data)
    assert 'id="cluster">production<' in page and "applied 12.5s after" in page
    assert section({"cluster": None}) == ""
    store.close()


def test_daemon_config_takes_cluster_and_promotion_sources() -> None:
    config = DaemonConfig.model_validate({"watch": "/x", "cluster": "production",
                                          "promotion_sources": {"staging": "http://login-staging:9464/"}})
    assert config.cluster == "production" and config.promotion_sources == {"staging": "http://login-staging:9464"}
    with pytest.raises(ValueError, match="without credentials"):
        DaemonConfig.model_validate({"watch": "/x", "promotion_sources": {"staging": "http://u:p@host:1"}})


def test_a_commit_waits_for_the_earlier_clusters_checks_after_its_apply(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    note_applied(store, D, 2_000.0, checks=True)  # staging's state has health checks: one must run after the apply
    check_store.record_many(store.conn, [_check(True, 1_500.0)])
    waiting = parse_upstream(answer(store, "staging", now=9_000.0))
    decision = decide(D, A, LINEAGE, waiting, 60.0, after="staging")
    assert decision.apply is None and decision.reason == UNCHECKED and "health checks" in decision.message
    check_store.record_many(store.conn, [_check(True, 2_100.0)])
    assert decide(D, A, LINEAGE, parse_upstream(answer(store, "staging", now=9_000.0)), 60.0,
                  after="staging").apply == D
    store.close()


def test_reconciler_status_shows_the_cluster_and_the_hold_only_for_a_cluster(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.set("applied_commit", A)
    plain = CliRunner().invoke(main, ["status", "--state-dir", str(tmp_path), "--format", "json"])
    assert plain.exit_code == 0 and "promotion" not in json.loads(plain.output)  # a single-cluster daemon: as before
    store.set("cluster", "production")
    held = run(None, unreachable="URLError: timed out")
    store.set(PROMOTION_KEY, journal(None, held, after="staging", source="http://s:9464", unreachable="timed out",
                                     now=60.0))
    store.close()
    text = CliRunner().invoke(main, ["status", "--state-dir", str(tmp_path)]).output
    assert "cluster:        production" in text
    assert f"holding {D[:12]} since 1970-01-01 00:01:00 UTC: staging's daemon did not answer" in text
    assert "unreachable since 1970-01-01 00:01:00 UTC" in text
