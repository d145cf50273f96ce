"""GPU fleet (issue 48): the dashboard's panels and the alert for `reconciler_gpu_rma_candidate{node,gpu,uuid,rule}`
and `reconciler_gpu_health_score{node,gpu}`; the alert through `promtool test rules`."""

from __future__ import annotations

import json
from pathlib import Path

from tests.daemon.test_monitoring import (
    ALERTS,
    DASHBOARD,
    alert_rules,
    assert_promtool_tests_pass,
    needs_promtool,
)

RMA_PANEL_EXPR = 'max by (node, gpu, uuid, rule) (reconciler_gpu_rma_candidate{job=~"$job"}) == 1'
SCORE_PANEL_EXPR = 'topk(20, max by (node, gpu) (reconciler_gpu_health_score{job=~"$job"}))'
ALERT_EXPR = "max by (node, gpu, uuid, rule) (reconciler_gpu_rma_candidate) == 1"
UUID_A = "GPU-8f2c4b1e-7d3a-4c55-9e21-0b6a1f3d9c70"
UUID_B = "GPU-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"


def test_gpu_fleet_panels_sit_below_the_others_without_overlap() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = dash["panels"]
    fleet = [p for p in panels if any(m in t["expr"] for t in p["targets"]
                                      for m in ("reconciler_gpu_rma_candidate", "reconciler_gpu_health_score"))]
    assert [(p["title"], [t["expr"] for t in p["targets"]]) for p in fleet] == [
        ("GPU RMA candidates", [RMA_PANEL_EXPR]), ("Worst GPUs by health score", [SCORE_PANEL_EXPR])]
    rma, score = fleet
    assert rma["type"] == "table" and rma["targets"][0]["instant"] is True and rma["targets"][0]["format"] == "table"
    organize = next(t for t in rma["transformations"] if t["id"] == "organize")["options"]
    assert organize["indexByName"] == {"node": 0, "gpu": 1, "uuid": 2, "rule": 3}
    assert organize["excludeByName"] == {"Time": True, "Value": True}
    assert score["type"] in ("table", "bargauge") and score["targets"][0]["instant"] is True
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    others = [p for p in panels if p not in fleet]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in others)
    assert all(p["gridPos"]["y"] >= bottom for p in fleet)  # appended at the bottom
    boxes = [(p["gridPos"]["x"], p["gridPos"]["y"], p["gridPos"]["w"], p["gridPos"]["h"]) for p in panels]
    for x, _, w, _ in boxes:
        assert x >= 0 and x + w <= 24
    for i, (x, y, w, h) in enumerate(boxes):  # no two panels overlap
        for x2, y2, w2, h2 in boxes[i + 1:]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y, (x, y, x2, y2)


def test_gpu_rma_candidate_alert_rule() -> None:
    rule = next(r for r in alert_rules() if r["alert"] == "ReconcilerGpuRmaCandidate")
    assert rule["expr"] == ALERT_EXPR
    assert rule["for"] == "1m" and rule["labels"] == {"severity": "warning"}
    assert rule["annotations"]["summary"] == ("{{ $labels.node }} GPU {{ $labels.gpu }} ({{ $labels.uuid }}) "
                                              "is an RMA candidate: {{ $labels.rule }}")
    description = rule["annotations"]["description"]
    assert "`reconciler gpus UUID`" in description and "checks.fleet.rma" in description
    assert "docs/gpu-fleet.md" in description


# gpu01 GPU 3 is a candidate from 10m, exported by both daemons of the pair (one alert, not two), and stale after
# 15m; gpu02 GPU 0 meets another rule from the start until 5m, then no longer.
UNIT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'reconciler_gpu_rma_candidate{{job="reconciler",instance="login01:9464",node="gpu01",gpu="3",uuid="{uuid_a}",rule="row-remap-failure"}}'
        values: '_x10 1x5 stale'
      - series: 'reconciler_gpu_rma_candidate{{job="reconciler",instance="login02:9464",node="gpu01",gpu="3",uuid="{uuid_a}",rule="row-remap-failure"}}'
        values: '_x10 1x5 stale'
      - series: 'reconciler_gpu_rma_candidate{{job="reconciler",instance="login01:9464",node="gpu02",gpu="0",uuid="{uuid_b}",rule="xid-hardware"}}'
        values: '1x5 stale'
    alert_rule_test:
      - eval_time: 30s
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts: []
      - eval_time: 2m
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts:
          - exp_labels: {{severity: warning, node: gpu02, gpu: "0", uuid: "{uuid_b}", rule: xid-hardware}}
            exp_annotations:
              summary: "gpu02 GPU 0 ({uuid_b}) is an RMA candidate: xid-hardware"
              description: "{description}"
      - eval_time: 9m
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts: []
      - eval_time: 10m
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts: []
      - eval_time: 10m30s
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts: []
      - eval_time: 12m
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts:
          - exp_labels: {{severity: warning, node: gpu01, gpu: "3", uuid: "{uuid_a}", rule: row-remap-failure}}
            exp_annotations:
              summary: "gpu01 GPU 3 ({uuid_a}) is an RMA candidate: row-remap-failure"
              description: "{description}"
      - eval_time: 15m
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts:
          - exp_labels: {{severity: warning, node: gpu01, gpu: "3", uuid: "{uuid_a}", rule: row-remap-failure}}
            exp_annotations:
              summary: "gpu01 GPU 3 ({uuid_a}) is an RMA candidate: row-remap-failure"
              description: "{description}"
      - eval_time: 16m
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts: []
      - eval_time: 30m
        alertname: ReconcilerGpuRmaCandidate
        exp_alerts: []
"""


@needs_promtool
def test_promtool_gpu_rma_alert_fires_after_1m_and_clears(tmp_path: Path) -> None:
    rule = next(r for r in alert_rules() if r["alert"] == "ReconcilerGpuRmaCandidate")
    description = rule["annotations"]["description"]
    text = UNIT_TESTS.format(rules=json.dumps(str(ALERTS)), uuid_a=UUID_A, uuid_b=UUID_B,
                             description=description.replace("\\", "\\\\").replace('"', '\\"'))
    assert_promtool_tests_pass(tmp_path / "gpu_rma.test.yaml", text)
