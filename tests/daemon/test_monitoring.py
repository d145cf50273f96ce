"""deploy/grafana/reconciler.json and deploy/prometheus/alerts.yaml against the daemon's real metric registry;
the rules through promtool (`check rules`, and `test rules` with series that must and must not fire)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase
from ruamel.yaml import YAML

from reconciler.daemon.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "reconciler.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yaml"
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "info": ("_info",)}
SCRAPE_LABELS = {"job", "instance"}  # added by Prometheus to every series
METRIC = re.compile(r"\b(reconciler_[a-z_]+)\b(\{[^}]*\})?")
PROMTOOL = shutil.which("promtool")


def registry_series() -> dict[str, set[str]]:
    """Every series name the daemon can export -> its label names (histogram buckets add `le`)."""
    metrics = Metrics()
    series: dict[str, set[str]] = {}
    for wrapper in vars(metrics).values():
        if not isinstance(wrapper, MetricWrapperBase):
            continue
        kind = wrapper._type  # noqa: SLF001 - the wrapper's type as exposed
        labels = set(wrapper._labelnames)  # noqa: SLF001
        if kind == "info":
            labels |= {"commit", "subject"}
        for suffix in SUFFIXES[kind]:
            series[wrapper._name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())  # noqa: SLF001
    return series


def used_metrics(expr: str) -> Iterator[tuple[str, set[str]]]:
    """(series name, label names in its selector) of every reconciler_ metric in a PromQL expression."""
    for match in METRIC.finditer(expr):
        selector = match.group(2) or "{}"
        yield match.group(1), set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", selector))


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and template queries."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dash["panels"] for t in panel.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"])
    return exprs


def alert_rules() -> list[dict[str, Any]]:
    doc = YAML(typ="safe").load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_dashboard_metric_and_label_exists_in_the_registry() -> None:
    series = registry_series()
    used = set()
    for expr in dashboard_exprs():
        for name, labels in used_metrics(expr):
            assert name in series, f"{name} is not exported by the daemon (in {expr})"
            assert labels <= series[name] | SCRAPE_LABELS, f"{name}: unknown label(s) {labels - series[name]}"
            used.add(name)
    # the dashboard covers every metric family (histogram and counter helpers aside)
    families = {name for name in series if not name.endswith(("_created", "_sum", "_count"))}
    families -= {"reconciler_reconcile_duration_seconds_bucket"} - used
    assert families - used == set(), f"not on the dashboard: {families - used}"


def test_dashboard_is_an_importable_grafana_model() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "reconciler" and dash["__inputs"][0]["pluginId"] == "prometheus"
    ids = [panel["id"] for panel in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    titles = " ".join(panel["title"] for panel in dash["panels"]).lower()
    for topic in ("runs", "duration", "drift", "checks", "bus bandwidth"):
        assert topic in titles, topic


REQUIRED_ALERTS = {"ReconcilerNotSucceeding", "ReconcilerDriftPersists", "ReconcilerCheckFailing",
                   "ReconcilerDrainedNode", "ReconcilerSourceInvalid"}


def test_alert_rules_are_complete_and_use_exported_metrics() -> None:
    series = registry_series()
    rules = alert_rules()
    assert {r["alert"] for r in rules} >= REQUIRED_ALERTS
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        for name, labels in used_metrics(rule["expr"]):
            assert name in series, f"{rule['alert']}: {name} is not exported by the daemon"
            assert labels <= series[name] | SCRAPE_LABELS, f"{rule['alert']}: {name} has no label {labels}"


needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian's prometheus package)")


def assert_promtool_tests_pass(path: Path, text: str) -> None:
    """Write TEXT (a `promtool test rules` file) to PATH and check that promtool says SUCCESS."""
    assert PROMTOOL is not None
    path.write_text(text)
    out = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


@needs_promtool
def test_promtool_check_rules() -> None:
    assert PROMTOOL is not None
    out = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and f"SUCCESS: {len(alert_rules())} rules found" in out.stdout, out.stdout + out.stderr


# Series sampled every minute for 2 hours; `eval_time` checks which alerts fire then.
UNIT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # drift_interval 5m; the last success at t=0, so 3 intervals pass at 15m (+5m for)
      - series: 'reconciler_drift_interval_seconds{{job="reconciler",instance="login01:9464"}}'
        values: '300x120'
      - series: 'reconciler_last_success_timestamp_seconds{{job="reconciler",instance="login01:9464"}}'
        values: '0x120'
      - series: 'reconciler_drifted_resources{{job="reconciler",instance="login01:9464",node="gpu01",driver="mounts"}}'
        values: '1x120'
      - series: 'reconciler_drifted_resources{{job="reconciler",instance="login01:9464",node="gpu02",driver="mounts"}}'
        values: '0x120'
      - series: 'reconciler_node_drained{{job="reconciler",instance="login01:9464",node="gpu02",by="reconciler"}}'
        values: '1x120'
      - series: 'reconciler_node_drained{{job="reconciler",instance="login01:9464",node="gpu03",by="other"}}'
        values: '1x120'
      - series: 'reconciler_source_valid{{job="reconciler",instance="login01:9464"}}'
        values: '1x30 0x90'
      - series: 'reconciler_check_ok{{job="reconciler",instance="login01:9464",check="nccl",node="gpu02"}}'
        values: '1x60 0x60'
    alert_rule_test:
      - eval_time: 12m
        alertname: ReconcilerNotSucceeding
        exp_alerts: []
      - eval_time: 25m
        alertname: ReconcilerNotSucceeding
        exp_alerts:
          - exp_labels: {{severity: critical, job: reconciler, instance: "login01:9464"}}
            exp_annotations:
              summary: "reconciler on login01:9464: no successful run for 3 drift intervals"
              description: "The last run ended in error or failed (`reconciler history`, the status page's last runs); the cluster keeps its last applied state."
      - eval_time: 50m
        alertname: ReconcilerDriftPersists
        exp_alerts: []
      - eval_time: 70m
        alertname: ReconcilerDriftPersists
        exp_alerts:
          - exp_labels: {{severity: warning, instance: "login01:9464", node: gpu01, driver: mounts}}
            exp_annotations:
              summary: "gpu01: 1 resource(s) of mounts differ from Git for over an hour"
              description: "In report mode drift is only reported; in enforce mode it means healing fails. Diffs: the status page or `reconciler status`."
      - eval_time: 10m
        alertname: ReconcilerDrainedNode
        exp_alerts:
          - exp_labels: {{severity: warning, job: reconciler, instance: "login01:9464", node: gpu02, by: reconciler}}
            exp_annotations:
              summary: "gpu02 is drained by the reconciler"
              description: "A health check drained the node (reason `reconciler: ...` in `scontrol show node`); it is resumed when the check passes again."
      - eval_time: 35m
        alertname: ReconcilerSourceInvalid
        exp_alerts: []
      - eval_time: 45m
        alertname: ReconcilerSourceInvalid
        exp_alerts:
          - exp_labels: {{severity: warning, job: reconciler, instance: "login01:9464"}}
            exp_annotations:
              summary: "the newest commit of the desired state does not validate (or is not signed)"
              description: "The cluster stays at the last good commit; `reconciler status` lists the errors as file:line."
      - eval_time: 65m
        alertname: ReconcilerCheckFailing
        exp_alerts: []
      - eval_time: 75m
        alertname: ReconcilerCheckFailing
        exp_alerts:
          - exp_labels: {{severity: warning, job: reconciler, instance: "login01:9464", check: nccl, node: gpu02}}
            exp_annotations:
              summary: "health check nccl fails on gpu02"
              description: "The latest result of the check is a failure (`reconciler status` shows the message)."
"""


@needs_promtool
def test_promtool_unit_tests_fire_and_stay_quiet(tmp_path: Path) -> None:
    """Each alert fires after its `for` on series that break it, not before, and not on healthy series."""
    assert_promtool_tests_pass(tmp_path / "alerts.test.yaml", UNIT_TESTS.format(rules=json.dumps(str(ALERTS))))
