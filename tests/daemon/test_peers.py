"""A pair's merged history: /runs.json served by the daemon's real listener, fetched and merged by the peer;
a peer that does not answer is named, not waited for; the status page marks runs by daemon and shows the role."""

from __future__ import annotations

import time
from pathlib import Path

from reconciler.daemon.config import PeerConfig
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.peers import merge, peer_runs, runs_json
from reconciler.daemon.status_page import Snapshot, render, role_line
from reconciler.daemon.store import Store
from tests.transport.sshd_server import free_port


def store_with_runs(path: Path, runs: list[tuple[str, str, str]]) -> Store:
    store = Store(path)
    for run_id, mode, outcome in runs:
        store.start_run(run_id, "poll", mode, "c0ffee" * 6 + "abcd", "subject")
        store.finish_run(run_id, outcome)
        time.sleep(0.01)
    return store


def test_peer_runs_are_fetched_merged_and_marked(tmp_path: Path) -> None:
    peer_db = tmp_path / "peer.db"
    store_with_runs(peer_db, [("p1", "enforce", "applied"), ("p2", "enforce", "in-sync")]).close()
    local = store_with_runs(tmp_path / "local.db", [("l1", "report", "drift")])
    port = free_port()
    server = Metrics().serve(f"127.0.0.1:{port}", None, lambda limit: runs_json(peer_db, "login1", limit))
    try:
        remote, missing = peer_runs([PeerConfig(name="login1", url=f"http://127.0.0.1:{port}"),
                                     PeerConfig(name="login3", url=f"http://127.0.0.1:{free_port()}")], 10)
    finally:
        server.shutdown()
    assert [(d, r.run_id) for d, r in remote] == [("login1", "p2"), ("login1", "p1")]
    assert list(missing) == ["login3"] and "refused" in missing["login3"].lower()
    both = merge("login2", local.runs(10), remote, 10)
    assert [(d, r.run_id) for d, r in both] == [("login2", "l1"), ("login1", "p2"), ("login1", "p1")]
    page = render(Snapshot(generated=time.time(), mode="enforce", runs=local.runs(10), daemon="login2",
                           peer_runs=remote, peer_errors=missing,
                           ha={"name": "login2", "role": "standby", "leader": "login1", "lease_epoch": 4,
                               "leader_address": "http://login1:9464", "lease_node": "ctl"}))
    local.close()
    assert "<th>daemon</th>" in page and "<td>login1</td>" in page and "<td>login2</td>" in page
    assert "runs of login3 missing" in page
    assert "standby: login2; leader login1 (epoch 4, http://login1:9464)" in page
    assert "enforce (standby: report only)" in page


def test_role_lines() -> None:
    assert role_line({"name": "login1", "role": "leader", "epoch": 3, "lease_node": "ctl", "expires_in": 14.2}) == \
        "leader: login1 (epoch 3, lease on ctl, 14.2s left)"
    line = role_line({"name": "login2", "role": "standby", "leader": None, "error": "lease node ctl: timed out",
                      "stepped_down": "fenced: gpu01: fenced: epoch 3 of login2 is older than epoch 4 of login1"})
    assert line.startswith("standby: login2; leader none; lease node unreachable: lease node ctl: timed out")
    assert "stepped down: fenced" in line
