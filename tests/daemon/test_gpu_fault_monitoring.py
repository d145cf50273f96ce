"""GPU faults (issue 23): `reconciler_gpu_fault{node,gpu,kind}`, the status page's table, the dashboard panel and
the alert, all read from check results in a real SQLite state database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from reconciler.checks import store as check_store
from reconciler.checks.results import CheckResult
from reconciler.daemon.metrics import Metrics, gpu_faults
from reconciler.daemon.status_page import Snapshot, load_snapshot, render
from reconciler.daemon.store import Store
from tests.daemon.test_monitoring import (
    ALERTS,
    DASHBOARD,
    alert_rules,
    assert_promtool_tests_pass,
    needs_promtool,
)
from tests.daemon.test_status_page import ALLOWED_TAGS, parse

START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
HOSTILE = 'gpu 2 xid 48 <script>alert("x")</script> & more'
HELP = ("# HELP reconciler_gpu_fault 1 for each GPU fault in the latest result of a node check (gpu: its index, "
        "empty for the node's GPUs as a whole; kind: xid, ecc, nvlink, ...)")


def node_result(node: str, details: list[str], check: str = "gpu-health", minutes: int = 0,
                skipped: bool = False) -> CheckResult:
    """A node check's result as checks/node.py stores it: one `<status>: <message>` line per item."""
    ok = not any(line.startswith(("fail:", "error:")) for line in details)
    return CheckResult(check=check, kind="node", node=node, ok=ok, message="gpus: 8 x H100" if ok else "gpu faults",
                       details=details, started=START + timedelta(minutes=minutes), skipped=skipped)


FAULTY = [
    node_result("gpu01", ["pass: gpus: 8 x NVIDIA H100 80GB HBM3, driver 550.54.15",
                          "fail: gpu 3 xid 79 (fallen off the bus)",
                          "fail: gpu 0 ecc 4 uncorrected errors since the last reset",
                          "pass: gpu 1 temperature 41 C",  # a passing item is no fault
                          "error: gpu 7 nvlink: no complete output from the probe"]),  # an error item neither
    node_result("gpu01", ["fail: gpu 3 xid 79 (fallen off the bus)",  # the same fault from another check: once
                          "fail: gpu 10 row-remap pending (reset the GPU)"], check="gpu-deep", minutes=1),
    node_result("gpu02", ["fail: gpu 5 nvlink 11 of 12 links up (1 inactive)",
                          "fail: gpu dcgm level 2 failed: PCIe All",
                          "fail: gpus: found 7, expected 8",  # not a GPU fault (no `gpu ` prefix)
                          "fail: service nvidia-persistenced: inactive"], minutes=2),
    node_result('gpu"03\\', ["fail: gpu 1 row-remap pending (reset the GPU)"], minutes=3),  # label value escaped
    CheckResult(check="nightly", kind="nccl", node="gpu04", ok=False, message="busbw low", started=START,
                details=["fail: gpu 0 xid 79 (fallen off the bus)"]),  # NCCL results are not node checks
]
FAULT_LINES = [
    'reconciler_gpu_fault{gpu="",kind="dcgm",node="gpu02"} 1.0',
    'reconciler_gpu_fault{gpu="0",kind="ecc",node="gpu01"} 1.0',
    'reconciler_gpu_fault{gpu="1",kind="row-remap",node="gpu\\"03\\\\"} 1.0',
    'reconciler_gpu_fault{gpu="10",kind="row-remap",node="gpu01"} 1.0',
    'reconciler_gpu_fault{gpu="3",kind="xid",node="gpu01"} 1.0',
    'reconciler_gpu_fault{gpu="5",kind="nvlink",node="gpu02"} 1.0',
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A real state database holding the faulty results."""
    db = Store(tmp_path / "state.db")
    check_store.ensure_schema(db.conn)
    check_store.record_many(db.conn, FAULTY)
    yield db
    db.close()


def exported(metrics: Metrics) -> list[str]:
    """The gpu_fault lines of /metrics: HELP and TYPE as written, samples sorted (their order is the client's)."""
    lines = [line for line in generate_latest(metrics.registry).decode().splitlines() if "reconciler_gpu_fault" in line]
    return [line for line in lines if line.startswith("#")] + sorted(line for line in lines if not line.startswith("#"))


def test_gpu_fault_metric_lines_from_the_latest_results(store: Store) -> None:
    metrics = Metrics()
    assert exported(metrics) == [HELP, "# TYPE reconciler_gpu_fault gauge"]
    metrics.set_gpu_faults(check_store.latest(store.conn))
    assert exported(metrics) == [HELP, "# TYPE reconciler_gpu_fault gauge", *FAULT_LINES]


def test_gpu_fault_metric_goes_away_when_a_later_result_passes(store: Store) -> None:
    metrics = Metrics()
    metrics.set_gpu_faults(check_store.latest(store.conn))
    check_store.record_many(store.conn, [
        node_result("gpu01", ["pass: gpus: 8 x NVIDIA H100 80GB HBM3, driver 550.54.15"], minutes=10),
        node_result("gpu02", ["fail: gpu 5 nvlink 10 of 12 links up (2 inactive)"], minutes=10),  # still faulty
        node_result('gpu"03\\', [], minutes=10, skipped=True),  # a skipped run keeps the last verdict
    ])
    metrics.set_gpu_faults(check_store.latest(store.conn))
    assert exported(metrics)[2:] == [
        'reconciler_gpu_fault{gpu="1",kind="row-remap",node="gpu\\"03\\\\"} 1.0',
        'reconciler_gpu_fault{gpu="10",kind="row-remap",node="gpu01"} 1.0',  # gpu-deep has not run again
        'reconciler_gpu_fault{gpu="3",kind="xid",node="gpu01"} 1.0',  # ... and still reports it
        'reconciler_gpu_fault{gpu="5",kind="nvlink",node="gpu02"} 1.0',
    ]
    check_store.record_many(store.conn, [
        node_result("gpu01", ["pass: gpus: 8"], check="gpu-deep", minutes=11),
        node_result("gpu02", ["pass: gpus: 8"], minutes=11),
        node_result('gpu"03\\', ["pass: gpus: 8"], minutes=11),
    ])
    metrics.set_gpu_faults(check_store.latest(store.conn))
    assert exported(metrics) == [HELP, "# TYPE reconciler_gpu_fault gauge"]


def test_gpu_faults_sorted_by_node_and_gpu_number() -> None:
    faults = gpu_faults(FAULTY)
    assert [(f.node, f.gpu, f.kind, f.check) for f in faults] == [
        ('gpu"03\\', "1", "row-remap", "gpu-health"), ("gpu01", "0", "ecc", "gpu-health"),
        ("gpu01", "3", "xid", "gpu-deep"), ("gpu01", "3", "xid", "gpu-health"), ("gpu01", "10", "row-remap", "gpu-deep"),
        ("gpu02", "", "dcgm", "gpu-health"), ("gpu02", "5", "nvlink", "gpu-health")]
    assert faults[1].message == "gpu 0 ecc 4 uncorrected errors since the last reset"
    assert faults[1].started == START and faults[2].started == START + timedelta(minutes=1)


def test_status_page_shows_gpu_faults_and_escapes_them(store: Store) -> None:
    check_store.record(store.conn, node_result("gpu09", [f"fail: {HOSTILE}"], minutes=5))
    html_text = render(load_snapshot(store.path))
    page = parse(html_text)
    sections = [a["id"] for t, a in page.tags if t == "section"]
    assert sections.index("gpu-faults") == sections.index("checks") + 1
    assert {t for t, _ in page.tags} <= ALLOWED_TAGS
    assert "<script" not in html_text.lower() and "&lt;script&gt;" in html_text
    text = page.all_text()
    assert "GPU faults" in text and HOSTILE in text  # shown as text, not markup
    start = text.index("GPU faults")
    table = text[start:text.index("Drained nodes")]
    assert table.startswith("GPU faultsnodeGPUkindmessagecheckchecked")
    assert "gpu01" + "3" + "xid" + "gpu 3 xid 79 (fallen off the bus)" + "gpu-deep" + "2027-03-01 08:01:00 UTC" in table
    assert "gpu02" + "all" + "dcgm" + "gpu dcgm level 2 failed: PCIe All" + "gpu-health" in table
    assert "gpu09" + "2" + "xid" + HOSTILE in table and 'gpu"03\\' in table
    assert "found 7, expected 8" not in table and "nvidia-persistenced" not in table


def test_status_page_without_gpu_faults_has_no_section(store: Store) -> None:
    check_store.record_many(store.conn, [
        node_result(node, ["pass: gpus: 8"], check=check, minutes=20)
        for node, check in [("gpu01", "gpu-health"), ("gpu01", "gpu-deep"), ("gpu02", "gpu-health"),
                            ('gpu"03\\', "gpu-health")]])
    page = parse(render(load_snapshot(store.path)))
    assert "gpu-faults" not in [a["id"] for t, a in page.tags if t == "section"]
    assert "GPU faults" not in render(Snapshot(generated=0.0))


def test_gpu_fault_metric_panel_and_alert() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for p in dash["panels"] if any("reconciler_gpu_fault" in t["expr"] for t in p["targets"])]
    assert [p["title"] for p in panels] == ["GPU faults"]
    boxes = [(p["gridPos"]["x"], p["gridPos"]["y"], p["gridPos"]["w"], p["gridPos"]["h"]) for p in dash["panels"]]
    for i, (x, y, w, h) in enumerate(boxes):  # no two panels overlap
        for x2, y2, w2, h2 in boxes[i + 1:]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y, (x, y, x2, y2)
    rule = next(r for r in alert_rules() if r["alert"] == "ReconcilerGpuFault")
    assert rule["expr"] == "max by (node, gpu, kind) (reconciler_gpu_fault) > 0"


UNIT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'reconciler_gpu_fault{{job="reconciler",instance="login01:9464",node="gpu01",gpu="3",kind="xid"}}'
        values: '_x10 1x20'
      - series: 'reconciler_gpu_fault{{job="reconciler",instance="login01:9464",node="gpu02",kind="dcgm"}}'
        values: '1x10 stale'
    alert_rule_test:
      - eval_time: 13m
        alertname: ReconcilerGpuFault
        exp_alerts: []
      - eval_time: 17m
        alertname: ReconcilerGpuFault
        exp_alerts:
          - exp_labels: {{severity: warning, node: gpu01, gpu: "3", kind: xid}}
            exp_annotations:
              summary: "gpu01: xid fault on GPU 3"
              description: "{description}"
      - eval_time: 7m
        alertname: ReconcilerGpuFault
        exp_alerts:
          - exp_labels: {{severity: warning, node: gpu02, kind: dcgm}}
            exp_annotations:
              summary: "gpu02: dcgm fault on its GPUs"
              description: "{description}"
      - eval_time: 40m
        alertname: ReconcilerGpuFault
        exp_alerts: []
"""


@needs_promtool
def test_promtool_gpu_fault_alert_fires_after_5m_and_clears(tmp_path: Path) -> None:
    description = next(r for r in alert_rules() if r["alert"] == "ReconcilerGpuFault")["annotations"]["description"]
    assert_promtool_tests_pass(tmp_path / "gpu_fault.test.yaml", UNIT_TESTS.format(rules=json.dumps(str(ALERTS)), description=description.replace('"', '\\"')))
