"""run_checks end to end against a simulated cluster: drains, retests in a reservation, resumes, store, no-act."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from reconciler.checks import store
from reconciler.checks.runner import UnknownCheckError, check_run, run_checks
from reconciler.desired.loader import LoadedState
from reconciler.model import DesiredState
from tests.checks.fake_cluster import FakeCluster

NCCL_REASON = "reconciler: nccl nightly: all_reduce busbw 118.6 < 330 GB/s"


def loaded(nodes: str = "gpu[01-03]", **checks: Any) -> LoadedState:
    state = DesiredState.model_validate({
        "cluster": {"name": "tb", "slurm_version": "22.05", "controllers": ["ctl"],
                    "node_sets": [{"nodes": nodes, "gpus": {"count": 8}}],
                    "partitions": [{"name": "debug", "nodes": nodes, "default": True}]},
        "ssh": {"service_manager": {"type": "supervisord"}},
        "nodes": [{"name": "ctl", "roles": ["controller", "login"]}, {"name": nodes, "roles": ["compute"]}],
        "checks": checks or {"nccl": [{"name": "nightly", "nodes": nodes, "mpi": "pmi2",
                                       "thresholds": {"min_busbw": 330, "at_size": "1G"}}]},
    })
    return LoadedState(state=state, root=Path("."))


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def by_node(results: list[Any]) -> dict[str, str]:
    return {r.node: r.status for r in results}


def test_degraded_node_drained_then_retested_in_a_reservation_and_resumed(conn: sqlite3.Connection) -> None:
    cluster = FakeCluster(["gpu01", "gpu02", "gpu03"])
    cluster.degraded = {"gpu02"}
    cluster.reason["gpu03"] = "maintenance"
    lines: list[str] = []

    results = run_checks(loaded(), cluster, conn, log=lines.append)
    assert by_node(results) == {"gpu01": "PASS", "gpu02": "FAIL", "gpu03": "SKIP"}
    assert cluster.reason == {"gpu02": NCCL_REASON, "gpu03": "maintenance"}
    assert f"drain gpu02 ({NCCL_REASON})" in lines
    assert [r.gpu_seconds for r in results if not r.skipped] == [20.0, 20.0]  # 8 GPUs x 2.5 s
    assert len(store.latest(conn)) == 2 and store.history(conn, "nightly", "gpu01") == [pytest.approx(363.5125)]

    cluster.degraded.clear()  # the node is repaired
    cluster.commands.clear()
    results = run_checks(loaded(), cluster, conn, log=lines.append)
    assert by_node(results) == {"gpu01": "PASS", "gpu02": "PASS", "gpu03": "SKIP"}
    assert cluster.reason == {"gpu03": "maintenance"} and cluster.reservations == {}
    scontrol = [c for c in (cmd for _, cmd in cluster.commands) if c.startswith("scontrol")]
    assert scontrol[0].startswith("scontrol create reservation reservationname=reconciler-nightly-")
    assert scontrol[0].endswith("nodes=gpu02 users=root flags=maint,ignore_jobs")
    assert scontrol[1] == "scontrol update nodename=gpu02 state=resume"
    assert scontrol[2].startswith("scontrol delete reservationname=reconciler-nightly-")
    assert len(scontrol) == 3  # nothing else: gpu03 (maintenance) is never touched
    batch = cluster.sent("d=$(mktemp")[0]
    assert "--reservation=reconciler-nightly-" in batch.split("--nodelist=gpu02")[0].rsplit("timeout", 1)[1]
    assert "--reservation" not in batch.split("--nodelist=gpu01")[0].rsplit("timeout", 1)[1]


def test_a_retest_that_fails_again_drains_again_before_the_reservation_goes() -> None:
    cluster = FakeCluster(["gpu01", "gpu02"])
    cluster.degraded = {"gpu02"}
    run_checks(loaded("gpu[01-02]"), cluster)
    cluster.commands.clear()
    run_checks(loaded("gpu[01-02]"), cluster)
    scontrol = cluster.sent("scontrol")
    assert [c.split()[1] for c in scontrol] == ["create", "update", "update", "delete"]
    assert scontrol[1].endswith("state=resume") and f"reason='{NCCL_REASON}'" in scontrol[2]
    assert cluster.reason == {"gpu02": NCCL_REASON}


def test_no_act_changes_nothing_and_does_not_retest() -> None:
    cluster = FakeCluster(["gpu01", "gpu02"])
    cluster.degraded = {"gpu02"}
    outcome = check_run(loaded("gpu[01-02]"), cluster, act=False)
    assert by_node(outcome.results) == {"gpu01": "PASS", "gpu02": "FAIL"}
    assert [(a.node, a.kind, a.done) for a in outcome.actions] == [("gpu02", "drain", False)]
    assert cluster.sent("scontrol") == [] and cluster.reason == {}
    cluster.reason["gpu02"] = NCCL_REASON
    outcome = check_run(loaded("gpu[01-02]"), cluster, act=False)
    assert by_node(outcome.results) == {"gpu01": "PASS", "gpu02": "SKIP"}
    assert cluster.sent("scontrol") == []


def test_node_check_drain_keeps_the_node_out_of_the_nccl_run(conn: sqlite3.Connection) -> None:
    checks: dict[str, Any] = {"node": [{"name": "basics", "nodes": "gpu[01-03]", "mounts": ["/shared"], "services": ["munge", "slurmd"]}],
              "nccl": [{"name": "nightly", "nodes": "gpu[01-03]", "thresholds": {"min_busbw": 330}}]}
    cluster = FakeCluster(["gpu01", "gpu02", "gpu03"])
    cluster.unmounted = {"gpu01"}
    results = run_checks(loaded(**checks), cluster, conn)
    assert [(r.kind, r.node, r.status) for r in results] == [
        ("node", "gpu01", "FAIL"), ("node", "gpu02", "PASS"), ("node", "gpu03", "PASS"),
        ("nccl", "gpu01", "SKIP"), ("nccl", "gpu02", "PASS"), ("nccl", "gpu03", "PASS")]
    assert results[0].message == "mount /shared: not mounted"
    assert results[3].message == "skipped: drained (reconciler: check basics: mount /shared: not mounted)"
    assert cluster.reason == {"gpu01": "reconciler: check basics: mount /shared: not mounted"}
    probes = [(n, c) for n, c in cluster.commands if "@@reconciler-begin hostname" in c]
    assert sorted(n for n, _ in probes) == ["gpu01", "gpu02", "gpu03"]  # one command per node for all checks
    cluster.unmounted.clear()
    run_checks(loaded(**checks), cluster, conn)
    assert cluster.reason == {}


def test_a_check_failing_everywhere_drains_nothing() -> None:
    cluster = FakeCluster(["gpu01", "gpu02", "gpu03"])
    cluster.degraded = {"gpu01", "gpu02", "gpu03"}
    outcome = check_run(loaded(), cluster)
    assert [a.kind for a in outcome.actions] == ["refused"] * 3 and cluster.reason == {}
    assert not outcome.ok


def test_regression_against_the_nodes_own_history(conn: sqlite3.Connection) -> None:
    checks: dict[str, Any] = {"nccl": [{"name": "nightly", "nodes": "gpu[01-02]",
                        "thresholds": {"min_busbw": 100, "regression_pct": 10, "regression_window": 3}}]}
    cluster = FakeCluster(["gpu01", "gpu02"])
    for _ in range(3):
        assert all(r.ok for r in run_checks(loaded("gpu[01-02]", **checks), cluster, conn))
    cluster.degraded = {"gpu02"}  # 120 GB/s: above min_busbw 100, but 67% below its own median
    results = run_checks(loaded("gpu[01-02]", **checks), cluster, conn)
    assert by_node(results) == {"gpu01": "PASS", "gpu02": "FAIL"}
    assert "below its median 363.5 GB/s of the last 3 runs" in results[1].message
    assert cluster.reason["gpu02"].startswith("reconciler: nccl nightly: all_reduce busbw 120.0 GB/s is 67.0% below")


def test_unknown_check_name() -> None:
    with pytest.raises(UnknownCheckError, match="unknown check.*nope; defined: nightly"):
        run_checks(loaded(), FakeCluster(["gpu01"]), names=["nope"])


def test_drains_are_handed_over_between_node_and_nccl_checks(conn: sqlite3.Connection) -> None:
    checks: dict[str, Any] = {
        "node": [{"name": "basics", "nodes": "gpu[01-02]", "mounts": ["/shared"]},
                 {"name": "gpus", "nodes": "gpu[01-02]", "gpus": {"count": 8}, "drain_on_fail": False}],
        "nccl": [{"name": "nightly", "nodes": "gpu[01-02]", "thresholds": {"min_busbw": 330}}]}
    cluster = FakeCluster(["gpu01", "gpu02"])
    cluster.degraded = {"gpu01"}
    run_checks(loaded("gpu[01-02]", **checks), cluster, conn, names=["nightly"])
    assert cluster.reason == {"gpu01": NCCL_REASON}
    cluster.unmounted = {"gpu01"}  # now basics fails too: the node stays drained under nightly's reason
    run_checks(loaded("gpu[01-02]", **checks), cluster, conn, names=["basics", "gpus"])
    assert cluster.reason == {"gpu01": NCCL_REASON}
    cluster.degraded.clear()  # nightly is not retested while basics fails; gpus (no drains) does not block
    results = run_checks(loaded("gpu[01-02]", **checks), cluster, conn, names=["nightly"])
    assert results[0].message == "skipped: drained by this check; basics still fails"
    cluster.unmounted.clear()
    run_checks(loaded("gpu[01-02]", **checks), cluster, conn, names=["basics", "gpus"])
    assert cluster.reason == {"gpu01": NCCL_REASON}  # basics passes, but it never owned the drain
    results = run_checks(loaded("gpu[01-02]", **checks), cluster, conn, names=["nightly"])
    assert by_node(results) == {"gpu01": "PASS", "gpu02": "PASS"} and cluster.reason == {}


def test_a_passing_node_check_hands_its_drain_to_a_failing_nccl_check(conn: sqlite3.Connection) -> None:
    checks: dict[str, Any] = {
        "node": [{"name": "basics", "nodes": "gpu[01-02]", "mounts": ["/shared"]}],
        "nccl": [{"name": "nightly", "nodes": "gpu[01-02]", "thresholds": {"min_busbw": 330}}]}
    cluster = FakeCluster(["gpu01", "gpu02"])
    cluster.degraded = {"gpu01"}
    run_checks(loaded("gpu[01-02]", **checks), cluster, conn, names=["nightly"])  # nightly fails on gpu01
    cluster.reason["gpu01"] = "reconciler: check basics: mount /shared: not mounted"  # as if basics drained it
    outcome = check_run(loaded("gpu[01-02]", **checks), cluster, conn, names=["basics"])
    assert [(a.node, a.kind, a.note) for a in outcome.actions] == [
        ("gpu01", "drain", "basics passed, but nightly still fails")]
    assert cluster.reason == {"gpu01": NCCL_REASON}


def test_an_interrupted_retest_restores_the_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    import reconciler.checks.runner

    cluster = FakeCluster(["gpu01", "gpu02"])
    cluster.reason["gpu02"] = NCCL_REASON

    def broken(*args: Any, **kwargs: Any) -> list[Any]:
        assert cluster.reason == {}  # gpu02 was resumed inside the reservation for its retest
        raise KeyboardInterrupt

    monkeypatch.setattr(reconciler.checks.runner, "run_waves", broken)
    with pytest.raises(KeyboardInterrupt):
        run_checks(loaded("gpu[01-02]"), cluster)
    assert cluster.reason == {"gpu02": NCCL_REASON} and cluster.reservations == {}
