"""The status page on its own: built from a real SQLite store, parsed back with html.parser, served read-only."""

from __future__ import annotations

import re
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest

from reconciler.checks import store as check_store
from reconciler.checks.results import CheckResult
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.status_page import DRAINED_KEY, BusbwPoint, Snapshot, busbw_svg, load_snapshot, render
from reconciler.daemon.store import JOURNAL_KEY, Store
from reconciler.engine.plan import Change
from tests.transport.sshd_server import free_port

EVIL_NODE = 'gpu<script>alert("x")</script>01'
TOKEN = "ghp_SecretToken0123456789abcdef"
DIFF = ("--- a/etc/slurm/slurm.conf\n+++ b/etc/slurm/slurm.conf\n@@ -1,2 +1,2 @@\n ClusterName=rtb\n"
        "-PartitionName=old</td>\n+PartitionName=new <b>bold</b>\n")
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "h4", "p", "a", "main",
                "section", "dl", "dt", "dd", "code", "span", "ul", "li", "table", "thead", "tbody", "tr", "th", "td",
                "div", "details", "summary", "pre", "svg", "line", "text", "g", "polyline", "circle", "rect"}


@dataclass
class Parsed(HTMLParser):
    """Every start tag with its attributes and every text run, in order."""

    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.texts.append(data)

    def all_text(self) -> str:
        return "".join(self.texts)

    def attr_values(self, tag: str, name: str) -> list[str]:
        return [str(attrs[name]) for t, attrs in self.tags if t == tag and attrs.get(name) is not None]


def parse(page: str) -> Parsed:
    parsed = Parsed()
    parsed.feed(page)
    parsed.close()
    return parsed


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A real state database filled as the daemon fills it (runs, drift, meta, check results)."""
    db = filled_store(tmp_path / "state.db")
    yield db
    db.close()


def filled_store(path: Path) -> Store:
    """A state database with two runs, drift with a diff, drains, NCCL history and a failing node check."""
    db = Store(path)
    db.start_run("r1", "start", "enforce", "a" * 40, "initial")
    db.finish_run("r1", "applied", changes=5, applied=5, nodes=3)
    db.start_run("r2", "poll", "enforce", "b" * 40, "broken")
    db.finish_run("r2", "failed", changes=1, error=f"clone https://admin:{TOKEN}@git.example.org/x.git failed")
    db.set("applied_commit", "a" * 40)
    db.set("applied_at", 1_800_000_000.0)
    db.set("head_status", {"commit": "c" * 40, "status": "invalid", "errors": ["cluster.yaml:3:5: cluster.nmae: bad"]})
    changes = [Change(node=EVIL_NODE, driver="slurm_config", resource="/etc/slurm/slurm.conf", action="update",
                      summary="update /etc/slurm/slurm.conf", diff=DIFF),
               Change(node="gpu02", driver="mounts", resource="mount /shared", action="create",
                      summary=f"mount token={TOKEN} on /shared")]
    db.record_drift("r3", "a" * 40, changes, pending_commit=False)
    db.set(DRAINED_KEY, {"at": 1_800_000_100.0, "nodes": [
        {"node": "gpu02", "state": "IDLE+DRAIN", "reason": "reconciler: nccl nccl: busbw 118.6 < 330 GB/s"},
        {"node": "gpu03", "state": "DOWN+DRAIN", "reason": "<i>psu</i> replaced by ops"}]})
    start = datetime(2027, 1, 15, 12, 0, tzinfo=UTC)
    results = []
    for i in range(4):
        results.append(CheckResult(check="nightly", kind="nccl", node="gpu01", ok=True, message="ok",
                                   value=360.0 + i, started=start + timedelta(minutes=10 * i)))
        results.append(CheckResult(check="nightly", kind="nccl", node="gpu02", ok=i < 2, message="busbw low",
                                   value=350.0 - 80 * i, started=start + timedelta(minutes=10 * i)))
    results.append(CheckResult(check="daemons", kind="node", node="gpu03", ok=False, message="service slurmd: inactive"))
    check_store.record_many(db.conn, results)
    return db


def test_page_from_a_real_store_shows_every_section(store: Store) -> None:
    snap = load_snapshot(store.path, mode="enforce", source="/srv/git/cluster.git#main")
    page = parse(render(snap))
    text = page.all_text()
    assert [s for t, a in page.tags if t == "section" for s in [a["id"]]] == \
        ["source", "rollout", "runs", "drift", "checks", "drained", "busbw"]
    # commits: applied and newest with its file:line error
    assert page.attr_values("code", "title")[:2] == ["a" * 40, "c" * 40]
    assert "invalid" in text and "cluster.yaml:3:5: cluster.nmae: bad" in text
    # newest commit's status, the last runs (newest first), then the drift's actions
    badges = [c.removeprefix("badge ") for c in page.attr_values("span", "class") if c.startswith("badge ")]
    assert badges == ["invalid", "failed", "applied", "create", "update"]  # drift sorted by node
    # drift per node and driver, with the diff's lines marked
    assert page.attr_values("div", "data-node") == ["gpu02", EVIL_NODE]
    assert "+PartitionName=new <b>bold</b>" in text and "-PartitionName=old</td>" in text
    assert [c for c in page.attr_values("span", "class") if c in ("add", "del")] == ["del", "add"]
    # failing checks: the latest result of each check on each node
    assert "nightly" in text and "service slurmd: inactive" in text
    # drained nodes: the reconciler's drain told apart from a human's
    assert "reconciler: nccl nccl: busbw 118.6 < 330 GB/s" in text and "<i>psu</i> replaced by ops" in text
    assert "someone else" in text
    # the busbw plot: one line per node, each point of the history, higher bandwidth drawn higher
    assert page.attr_values("svg", "data-check") == ["nightly"]
    assert page.attr_values("g", "data-node") == ["gpu01", "gpu02"]
    lines = page.attr_values("polyline", "points")
    assert [len(pts.split()) for pts in lines] == [4, 4]
    gpu02_y = [float(p.split(",")[1]) for p in lines[1].split()]
    assert gpu02_y == sorted(gpu02_y)  # 350, 270, 190, 110 GB/s: each lower on the page (larger y)
    assert len([a for t, a in page.tags if t == "circle" and a.get("class") == "failed"]) == 2


def test_rollouts_in_flight_done_and_rolled_back(store: Store) -> None:
    waves = {"waves": [{"index": 1, "name": "canary", "nodeset": "gpu01"},
                       {"index": 2, "name": "step 2", "nodeset": "gpu[02-08]"}]}
    gate = {"gate": "smoke-job", "ok": False, "seconds": 1.25, "nodes": [EVIL_NODE],
            "message": f"smoke job failed on {EVIL_NODE}: drained by Slurm: Prolog error"}
    failed = {"commit": "d" * 40, "status": "rolled-back", "reason": "wave 1: smoke-job gate failed", "waves": waves,
              "timeline": [{"wave": 1, "name": "canary", "nodes": "gpu01", "started": 100.0, "applied_at": 100.5,
                            "ended": 102.0, "changes": 1, "gates": [gate], "ok": False}],
              "rollback": {"nodes": "gpu01", "to": "a" * 40, "resumed": ["gpu01"]}}
    store.record_rollout("r4", failed, 100.0)
    store.mark_rolled_back("d" * 40, {"gate": "smoke-job", "nodes": "gpu01", "message": gate["message"], "at": 103.0})
    store.set(JOURNAL_KEY, {"commit": "e" * 40, "waves": waves, "wave": 1, "phase": "gating"})
    page = parse(render(load_snapshot(store.path)))
    text = page.all_text()
    assert "wave 2 of 2" in text and "gpu[02-08]" in text and "gating" in text
    assert "rolled-back" in text and "0.5s (1 change(s))" in text and "smoke-job failed 1.2s" in text
    assert "Rolled back gpu01 to" in text and "resumed: gpu01" in text
    assert "Prolog error" in text and EVIL_NODE in text and "<script" not in render(load_snapshot(store.path))
    assert f"reconciler rollout retry {'d' * 12}" in text


def test_cluster_text_is_escaped_and_secrets_scrubbed(store: Store) -> None:
    html_text = render(load_snapshot(store.path))
    page = parse(html_text)
    assert {t for t, _ in page.tags} <= ALLOWED_TAGS, {t for t, _ in page.tags} - ALLOWED_TAGS
    assert "script" not in {t for t, _ in page.tags} and "<script" not in html_text.lower()
    assert EVIL_NODE in page.all_text()  # shown as text, not markup
    assert TOKEN not in html_text and "https://***@git.example.org" in page.all_text()
    assert "token=***" in page.all_text()
    assert not re.search(r"(src|href)=\"(https?:)?//", html_text)  # nothing loaded from elsewhere


def test_empty_state_and_missing_database(tmp_path: Path) -> None:
    snap = load_snapshot(tmp_path / "none.db")
    text = parse(render(snap)).all_text()
    assert "No run yet." in text and "In sync" in text and "No NCCL check result yet." in text
    Store(tmp_path / "state.db").close()
    assert load_snapshot(tmp_path / "state.db").runs == []


def test_single_point_plot_and_zero_bandwidth() -> None:
    when = datetime(2027, 1, 1, tzinfo=UTC)
    page = parse(busbw_svg("c", {"n1": [BusbwPoint(when, 0.0, False)]}))
    assert page.attr_values("polyline", "points") and page.attr_values("circle", "class") == ["failed"]


def test_read_only_connection_cannot_write(store: Store) -> None:
    reader = Store.open_read_only(store.path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.set("x", 1)
    finally:
        reader.close()


def test_database_of_an_older_daemon_gains_the_diff_column(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE current_drift (node TEXT NOT NULL, driver TEXT NOT NULL, resource TEXT NOT NULL, "
                 "action TEXT NOT NULL, summary TEXT NOT NULL, pending_commit INTEGER NOT NULL, since REAL NOT NULL, "
                 "PRIMARY KEY (node, driver, resource))")
    conn.execute("INSERT INTO current_drift VALUES ('gpu01','mounts','m','create','s',0,1.0)")
    conn.commit()
    conn.close()
    db = Store(path)
    try:
        assert [d.diff for d in db.current_drift()] == [None]
    finally:
        db.close()


def get(url: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_listener_serves_page_and_metrics_and_nothing_else(store: Store) -> None:
    metrics = Metrics()
    metrics.runs.labels(outcome="applied").inc()
    pages: list[str | Exception] = [render(load_snapshot(store.path)), RuntimeError("db gone")]

    def page() -> str:
        item = pages.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    port = free_port()
    server = metrics.serve(f"127.0.0.1:{port}", page)
    try:
        status, headers, body = get(f"http://127.0.0.1:{port}/")
        assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
        assert "default-src 'none'" in headers["Content-Security-Policy"] and "nightly" in body
        status, _, body = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and 'reconciler_runs_total{outcome="applied"} 1.0' in body
        assert get(f"http://127.0.0.1:{port}/", "POST")[0] == 405
        assert get(f"http://127.0.0.1:{port}/state.db")[0] == 404
        status, _, body = get(f"http://127.0.0.1:{port}/")  # the page fails: /metrics goes on
        assert status == 500 and "db gone" not in body
        assert get(f"http://127.0.0.1:{port}/metrics")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_snapshot_defaults_render() -> None:
    assert "reconciler status" in render(Snapshot(generated=0.0))
