"""The per-node states of a reboot-aware upgrade (issue 34) as `reconciler status`, `reconciler rollout status`, the
status page and reconciler_node_upgrade_state show them, read from the rollout journal in a real SQLite state database
(records built here in the format reconciler/rollout/upgrade.py journals)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from reconciler.daemon import upgrade_view
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.status_page import load_snapshot, render
from reconciler.daemon.store import JOURNAL_KEY, Store
from tests.daemon.test_monitoring import ALERTS, assert_promtool_tests_pass, needs_promtool
from tests.daemon.test_status_page import ALLOWED_TAGS, parse
from tests.transport.sshd_server import free_port

REPO = Path(__file__).resolve().parents[2]
COMMIT = "c0ffee" * 6 + "abcd"
NOW = 1_900_000_000.0
GATE = "gate gpu: driver 550.127.05, want 570.86.15"
HOSTILE = 'gate gpu: <script>alert("x")</script> & token=ghp_SecretToken0123456789abcdef'


def node(state: str, ago: float, reason: str | None = None, jobs: int = 0, boot_id: str | None = None,
         now: float = NOW) -> dict[str, Any]:
    """One node's entry of record["upgrade"]["nodes"], in the state AGO seconds before NOW."""
    return {"state": state, "since": now - ago, "reason": reason, "boot_id": boot_id, "jobs": jobs}


def upgrade_record(now: float = NOW, reason6: str = GATE) -> dict[str, Any]:
    """An upgrade of 8 nodes midway: 2 done, 2 rebooting, 2 waiting for jobs, 1 failed, 1 not started."""
    return {"max_unavailable": 4, "failed": ["gpu06"], "nodes": {
        "gpu01": node("done", 300, now=now), "gpu02": node("done", 240, now=now),
        "gpu03": node("rebooting", 40, "reconciler: upgrade " + COMMIT[:12], boot_id="b-old", now=now),
        "gpu04": node("rebooting", 75, boot_id="b-old", now=now),
        "gpu05": node("waiting-for-jobs", 720, jobs=1, now=now),
        "gpu07": node("waiting-for-jobs", 60, jobs=2, now=now),
        "gpu06": node("failed", 200, reason6, now=now),
        "gpu08": node("upgrade-required", 900, now=now)}}


def journal(now: float = NOW, **kw: Any) -> dict[str, Any]:
    """A rollout journal record (as the runner writes it) carrying the upgrade."""
    return {"commit": COMMIT, "previous": None, "phase": "apply", "wave": 0,
            "waves": {"waves": [{"name": "upgrade", "nodeset": "gpu[01-08]"}]}, "upgrade": upgrade_record(now, **kw)}


# ---------------------------------------------------------------- folding and text (pure)


def test_states_fold_by_state_in_the_machines_order_with_jobs_reasons_and_time() -> None:
    upgrade = upgrade_record()
    assert upgrade_view.lines(upgrade, True, NOW, COMMIT) == [
        f"upgrade:        in flight ({COMMIT[:12]}): 8 node(s), 2 done, 1 failed; at most 4 out at a time",
        "  upgrade-required: gpu08  (for 15 min)",
        "  waiting-for-jobs: gpu05 (1 job), gpu07 (2 jobs)  (for 60s to 12 min)",
        "  rebooting: gpu[03-04]  (for 40s to 75s)",
        "  done: gpu[01-02]  (for 4 min to 5 min)",
        f"  failed: gpu06 ({GATE})  (for 3 min)",
    ]


def test_nodes_of_one_state_with_different_reasons_are_listed_apart_and_the_same_ones_folded() -> None:
    nodes = {f"gpu{i:02d}": node("failed", 60, "gate gpu: XID 79" if i < 4 else "reboot: no new boot id in 15m")
             for i in range(1, 7)}
    group, = upgrade_view.groups(upgrade_view.node_states({"nodes": nodes}))
    assert group.count == 6 and group.nodes == "gpu[01-03],gpu[04-06]"
    assert group.parts == (("gpu[01-03]", "gate gpu: XID 79"), ("gpu[04-06]", "reboot: no new boot id in 15m"))


def test_a_garbled_or_unknown_entry_is_shown_not_raised() -> None:
    upgrade = {"nodes": {"gpu01": {"state": "frobnicating", "since": "not a time", "jobs": "x"}, "gpu02": "junk",
                         "gpu03": node("done", 5)}}
    text = upgrade_view.lines(upgrade, False, NOW)
    assert text[0] == "upgrade:        ended: 3 node(s), 1 done"
    assert text[1:] == ["  done: gpu03  (for 5s)", "  frobnicating: gpu01", "  unknown: gpu02"]


def test_a_rollout_without_an_upgrade_shows_none_and_one_in_flight_hides_the_last() -> None:
    last = {**journal(), "status": "complete"}
    assert upgrade_view.current(None, None) is None
    assert upgrade_view.current({"commit": "x", "wave": 0}, last) is None  # another rollout in flight
    assert upgrade_view.current(None, last) == (last["upgrade"], False)
    assert upgrade_view.current(journal(), None) == (journal()["upgrade"], True)


def test_the_view_knows_the_machines_states_in_its_order() -> None:
    from reconciler.rollout import upgrade

    assert upgrade_view.STATES == upgrade.STATES


def test_an_ended_rollout_without_its_upgrade_record_shows_the_waves_summaries() -> None:
    """The final rollout record keeps per wave `upgrade: {done, failed, skipped, rolled_back}` (no times)."""
    last = {"commit": COMMIT, "status": "rolled-back", "timeline": [
        {"wave": 1, "upgrade": {"done": ["gpu01", "gpu02"], "failed": {}, "skipped": {}, "rolled_back": []}},
        {"wave": 2, "upgrade": {"done": ["gpu04"], "failed": {"gpu03": GATE},
                                "skipped": {"gpu05": "drained by someone else: not upgraded"},
                                "rolled_back": ["gpu02", "gpu03"]}},
        {"wave": 3}]}
    assert upgrade_view.status_lines(None, last, NOW) == [
        f"upgrade:        ended ({COMMIT[:12]}): 5 node(s), 2 done, 2 rolled-back",
        "  upgrade-required: gpu05 (drained by someone else: not upgraded)",
        "  done: gpu[01,04]",
        f"  rolled-back: gpu02, gpu03 ({GATE})",
    ]
    assert upgrade_view.current(None, {"timeline": [{"wave": 1, "gates": []}]}) is None


def test_jobs_that_could_not_be_counted_are_not_shown_as_a_count() -> None:
    upgrade = {"nodes": {"gpu01": node("waiting-for-jobs", 10, jobs=-1)}}
    assert upgrade_view.lines(upgrade, True, NOW)[1] == "  waiting-for-jobs: gpu01  (for 10s)"


# ---------------------------------------------------------------- the CLI on a real state database


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A daemon state directory whose database holds a rollout journal with an upgrade in flight."""
    store = Store(tmp_path / "state.db")
    store.set(JOURNAL_KEY, journal(time.time()))
    store.close()
    yield tmp_path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`reconciler ARGS` as an admin runs it."""
    out = subprocess.run([sys.executable, "-m", "reconciler.cli", *args], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return out


def test_status_text_and_json_show_the_upgrade_in_flight(state_dir: Path) -> None:
    text = cli("status", "--state-dir", str(state_dir)).stdout
    assert f"upgrade:        in flight ({COMMIT[:12]}): 8 node(s), 2 done, 1 failed; at most 4 out at a time" in text
    assert re.search(r"^  rebooting: gpu\[03-04\]  \(for 4\ds to 7\ds\)$", text, re.M), text
    assert re.search(r"^  waiting-for-jobs: gpu05 \(1 job\), gpu07 \(2 jobs\)  \(for \d+s to 1[23] min\)$", text,
                     re.M), text
    assert f"  failed: gpu06 ({GATE})" in text
    data = json.loads(cli("status", "--state-dir", str(state_dir), "--format", "json").stdout)
    upgrade = data["upgrade"]
    assert upgrade["commit"] == COMMIT and upgrade["in_flight"] is True and upgrade["max_unavailable"] == 4
    assert [(s["state"], s["nodes"], s["count"]) for s in upgrade["states"]] == [
        ("upgrade-required", "gpu08", 1), ("waiting-for-jobs", "gpu05,gpu07", 2), ("rebooting", "gpu[03-04]", 2),
        ("done", "gpu[01-02]", 2), ("failed", "gpu06", 1)]
    gpu05 = upgrade["nodes"]["gpu05"]
    assert gpu05["state"] == "waiting-for-jobs" and gpu05["jobs"] == 1 and 715 <= gpu05["seconds"] <= 900
    assert upgrade["nodes"]["gpu06"]["reason"] == GATE and upgrade["failed"] == ["gpu06"]


def test_rollout_status_shows_the_upgrade_under_the_wave_and_in_its_json(state_dir: Path) -> None:
    lines = cli("rollout", "status", "--state-dir", str(state_dir)).stdout.splitlines()
    assert lines[0].startswith(f"rollout:        {COMMIT[:12]} wave 1 of 1 (apply) on gpu[01-08]")
    assert lines[1].startswith("upgrade:        in flight") and lines[2].startswith("  upgrade-required: gpu08")
    data = json.loads(cli("rollout", "status", "--state-dir", str(state_dir), "--format", "json").stdout)
    assert data["upgrade"]["states"][-1]["parts"] == [{"nodes": "gpu06", "detail": GATE}]


def test_status_shows_the_last_upgrades_final_states_once_it_ended(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    record = {**journal(time.time()), "status": "rolled-back", "reason": "gpu06 failed gate gpu"}
    record["upgrade"]["nodes"] = {"gpu01": node("rolled-back", 30, "rolled back to 550.127.05-1", now=time.time()),
                                  "gpu06": node("failed", 60, GATE, now=time.time())}
    store.record_rollout("run-1", record, time.time() - 120)
    store.close()
    text = cli("status", "--state-dir", str(tmp_path)).stdout
    assert f"  upgrade:        ended ({COMMIT[:12]}): 2 node(s), 0 done, 1 failed, 1 rolled-back" in text
    assert "    rolled-back: gpu01 (rolled back to 550.127.05-1)" in text
    data = json.loads(cli("status", "--state-dir", str(tmp_path), "--format", "json").stdout)
    assert data["upgrade"]["in_flight"] is False and data["rollout_in_flight"] is None


def test_status_without_an_upgrade_says_nothing_of_one(tmp_path: Path) -> None:
    Store(tmp_path / "state.db").close()
    assert "upgrade" not in cli("status", "--state-dir", str(tmp_path)).stdout
    assert json.loads(cli("status", "--state-dir", str(tmp_path), "--format", "json").stdout)["upgrade"] is None


# ---------------------------------------------------------------- the status page


def test_status_page_shows_the_states_as_a_table_escaped(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.set(JOURNAL_KEY, journal(time.time(), reason6=HOSTILE))
    store.close()
    page = render(load_snapshot(tmp_path / "state.db"))
    parsed = parse(page)
    assert {t for t, _ in parsed.tags} <= ALLOWED_TAGS | {"br"} and "<script>" not in page and "ghp_Secret" not in page
    table = page[page.index('<table class="upgrade">'):]
    table = table[:table.index("</table>")]
    rows = [re.sub(r"<[^>]+>", " ", row).split() for row in table.split("<tr>")[2:]]
    assert [row[:3] for row in rows] == [["upgrade-required", "1", "gpu08"], ["waiting-for-jobs", "2", "gpu05"],
                                         ["rebooting", "2", "gpu[03-04]"], ["done", "2", "gpu[01-02]"],
                                         ["failed", "1", "gpu06"]]
    assert "gpu07 2 jobs" in " ".join(rows[1]) and "for" in rows[2]
    assert "Upgrade, node by node (in flight: 8 node(s), 2 done, 1 failed; at most 4 out at a time)" in \
        parsed.all_text()
    assert 'gate gpu: <script>alert("x")</script>' in parsed.all_text()  # shown as text, not markup


def test_status_page_without_an_upgrade_has_no_upgrade_table(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.set(JOURNAL_KEY, {**journal(), "upgrade": None})
    store.close()
    page = render(load_snapshot(tmp_path / "state.db"))
    assert "in flight" in page and 'class="upgrade"' not in page


# ---------------------------------------------------------------- the metric


def metric_lines(metrics: Metrics) -> list[str]:
    return [line for line in generate_latest(metrics.registry).decode().splitlines()
            if line.startswith("reconciler_node_upgrade_state{")]


def test_metric_is_a_state_set_one_for_the_current_state_zero_for_the_others() -> None:
    metrics = Metrics()
    metrics.set_upgrade(upgrade_record())
    lines = metric_lines(metrics)
    assert len(lines) == 8 * len(upgrade_view.VIEW_STATES)
    ones = sorted(line for line in lines if line.endswith(" 1.0"))
    assert ones == sorted(f'reconciler_node_upgrade_state{{node="{n}",state="{s}"}} 1.0' for n, s in [
        ("gpu01", "done"), ("gpu02", "done"), ("gpu03", "rebooting"), ("gpu04", "rebooting"),
        ("gpu05", "waiting-for-jobs"), ("gpu06", "failed"), ("gpu07", "waiting-for-jobs"),
        ("gpu08", "upgrade-required")])
    assert 'reconciler_node_upgrade_state{node="gpu06",state="done"} 0.0' in lines
    metrics.set_upgrade({"nodes": {"gpu01": node("frobnicating", 1)}})  # unknown: exported, not hidden
    assert 'reconciler_node_upgrade_state{node="gpu01",state="frobnicating"} 1.0' in metric_lines(metrics)
    assert len(metric_lines(metrics)) == len(upgrade_view.VIEW_STATES) + 1
    metrics.set_upgrade(None)
    assert metric_lines(metrics) == []


def test_scrapes_read_the_journal_each_time(tmp_path: Path) -> None:
    """The daemon's listener refreshes the gauge from the state database at every scrape of /metrics."""
    db = tmp_path / "state.db"
    store = Store(db)
    metrics = Metrics()
    server = metrics.serve(f"127.0.0.1:{free_port()}", upgrade=lambda: upgrade_view.load(db))
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"

    def scrape() -> set[str]:
        with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - a local test server
            text = answer.read().decode()
        return {line for line in text.splitlines() if line.startswith("reconciler_node_upgrade_state{")
                and line.endswith(" 1.0")}

    try:
        assert scrape() == set()
        record = journal()
        record["upgrade"]["nodes"] = {"gpu01": node("rebooting", 5)}
        store.set(JOURNAL_KEY, record)
        assert scrape() == {'reconciler_node_upgrade_state{node="gpu01",state="rebooting"} 1.0'}
        record["upgrade"]["nodes"]["gpu01"] = node("validating", 1)
        store.set(JOURNAL_KEY, record)
        assert scrape() == {'reconciler_node_upgrade_state{node="gpu01",state="validating"} 1.0'}
        store.set(JOURNAL_KEY, None)  # the rollout ended with no record kept: nothing exported
        assert scrape() == set()
    finally:
        server.shutdown()
        store.close()


ALERT_TEST = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'reconciler_node_upgrade_state{{job="reconciler",instance="login01:9464",node="gpu06",state="failed"}}'
        values: '0x10 1x30'
      - series: 'reconciler_node_upgrade_state{{job="reconciler",instance="login01:9464",node="gpu06",state="validating"}}'
        values: '1x10 0x30'
      - series: 'reconciler_node_upgrade_state{{job="reconciler",instance="login01:9464",node="gpu01",state="failed"}}'
        values: '0x40'
      - series: 'reconciler_node_upgrade_state{{job="reconciler",instance="login01:9464",node="gpu01",state="done"}}'
        values: '1x40'
      - series: 'reconciler_node_upgrade_state{{job="reconciler",instance="login01:9464",node="gpu07",state="rollback-failed"}}'
        values: '0x10 1x30'
      - series: 'reconciler_node_upgrade_state{{job="reconciler",instance="login01:9464",node="gpu08",state="failed"}}'
        values: '1x12 0x28'
      - series: 'reconciler_node_upgrade_state{{job="reconciler",instance="login01:9464",node="gpu08",state="released"}}'
        values: '0x12 1x28'
    alert_rule_test:
      - eval_time: 14m
        alertname: ReconcilerUpgradeNodeFailed
        exp_alerts: []
      - eval_time: 20m
        alertname: ReconcilerUpgradeNodeFailed
        exp_alerts:
          - exp_labels: {{severity: warning, node: gpu06}}
            exp_annotations:
              summary: "gpu06 failed its upgrade and stays drained"
              description: "The node did not come back, or failed a gate after its reboot or driver reload; it stays drained with a `reconciler:` reason. Why: `reconciler status` (the upgrade's failed line) or the status page."
          - exp_labels: {{severity: warning, node: gpu07}}
            exp_annotations:
              summary: "gpu07 failed its upgrade and stays drained"
              description: "The node did not come back, or failed a gate after its reboot or driver reload; it stays drained with a `reconciler:` reason. Why: `reconciler status` (the upgrade's failed line) or the status page."
"""


@needs_promtool
def test_promtool_upgrade_failed_alert_fires_for_the_failed_node_only(tmp_path: Path) -> None:
    assert_promtool_tests_pass(tmp_path / "upgrade.test.yaml", ALERT_TEST.format(rules=json.dumps(str(ALERTS))))


# ---------------------------------------------------------------- what the nodes not started wait for (issue 46)


def test_what_the_rest_waits_for_is_shown_in_status_json_and_the_page_while_in_flight(tmp_path: Path) -> None:
    now = time.time()
    record = journal(now)
    record["upgrade"]["waiting"] = {"kind": "hold", "why": "outside the maintenance windows <b>&",
                                    "until": now + 3600, "nodes": ["gpu08", "gpu09", "gpu10"]}
    store = Store(tmp_path / "state.db")
    store.set(JOURNAL_KEY, record)
    store.close()
    text = cli("status", "--state-dir", str(tmp_path)).stdout
    assert re.search(r"^  not started: gpu\[08-10\] held: outside the maintenance windows <b>& \(until "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d \S+, in (59|60) min\)$", text, re.M), text
    data = json.loads(cli("status", "--state-dir", str(tmp_path), "--format", "json").stdout)
    assert data["upgrade"]["waiting"] == {"kind": "hold", "why": "outside the maintenance windows <b>&",
                                          "until": now + 3600, "nodes": "gpu[08-10]"}
    page = render(load_snapshot(tmp_path / "state.db"))
    assert "Not started: gpu[08-10] held: outside the maintenance windows &lt;b&gt;&amp;" in page
    ended = upgrade_view.lines(record["upgrade"], False, now)  # an ended upgrade waits for nothing
    assert not any("not started" in line for line in ended)


def test_a_garbled_waiting_part_is_not_shown() -> None:
    for garbled in ({"why": 3}, "held", {"kind": "hold"}):
        assert upgrade_view.waiting({"nodes": {}, "waiting": garbled}, True) is None


def test_a_reserved_node_says_when_its_reservation_starts_and_the_json_what_was_requeued() -> None:
    entry = {**node("waiting-for-jobs", 10, jobs=1), "reservation": "reconciler-upgrade-gpu01",
             "reservation_start": "2026-11-29T01:34:04", "requeued": ["812"]}
    gone = {**node("waiting-for-jobs", 10, jobs=0), "reservation_start": "2026-11-29T01:34:04"}  # deleted: not shown
    upgrade = {"nodes": {"gpu01": entry, "gpu02": gone}}
    assert upgrade_view.lines(upgrade, True, NOW)[1] == ("  waiting-for-jobs: gpu01 (1 job; reserved from "
                                                         "2026-11-29T01:34:04), gpu02  (for 10s)")
    shown = upgrade_view.as_json(upgrade, True, NOW)["nodes"]
    assert (shown["gpu01"]["reserved_from"], shown["gpu01"]["requeued"]) == ("2026-11-29T01:34:04", ["812"])
    assert (shown["gpu02"]["reserved_from"], shown["gpu02"]["requeued"]) == (None, [])
