"""Prometheus metrics of the daemon (prometheus-client, own registry, served on metrics_listen)."""

from __future__ import annotations

from collections import Counter as Tally
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

from reconciler.engine.plan import Change


class Metrics:
    """Every metric the daemon exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.last_success = Gauge("reconciler_last_success_timestamp_seconds",
                                  "Unix time of the last reconcile that ended without error", registry=r)
        self.last_run = Gauge("reconciler_last_run_timestamp_seconds", "Unix time of the last reconcile", registry=r)
        self.duration = Histogram("reconciler_reconcile_duration_seconds", "Duration of a reconcile run",
                                  ["mode"], buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
                                  registry=r)
        self.runs = Counter("reconciler_runs_total", "Reconcile runs by outcome", ["outcome"], registry=r)
        self.drifted = Gauge("reconciler_drifted_resources", "Resources that differ from the desired state",
                             ["node", "driver"], registry=r)
        self.applied_commit = Info("reconciler_applied_commit", "The commit last applied to the cluster", registry=r)
        self.head_commit = Info("reconciler_source_head", "The newest commit seen on the followed branch",
                                registry=r)
        self.source_ok = Gauge("reconciler_source_valid", "1 when the newest commit validates and may be applied",
                               registry=r)
        self.unreachable = Gauge("reconciler_unreachable_nodes", "Nodes that could not be reached in the last run",
                                 registry=r)
        self.check_ok = Gauge("reconciler_check_ok", "1 when the health check passed on the node",
                              ["check", "node"], registry=r)
        self.nccl_busbw = Gauge("reconciler_nccl_busbw_gbps", "Bus bandwidth measured by the NCCL check (GB/s)",
                                ["check", "node"], registry=r)
        self.check_gpu_seconds = Counter("reconciler_check_gpu_seconds_total", "GPU-seconds spent on health checks",
                                         ["check"], registry=r)

    def serve(self, listen: str) -> Any:
        """Serve /metrics on host:port in a background thread."""
        host, _, port = listen.rpartition(":")
        return start_http_server(int(port), addr=host.strip("[]"), registry=self.registry)

    def set_drift(self, changes: list[Change], nodes: list[str], drivers: list[str]) -> None:
        """Set the drifted-resource gauge for every node and driver (zeros included)."""
        tally = Tally((c.node, c.driver) for c in changes if c.changing)
        self.drifted.clear()
        for node, driver in {(n, d) for n in nodes for d in drivers} | tally.keys():
            self.drifted.labels(node=node, driver=driver).set(tally.get((node, driver), 0))

    def set_commit(self, info: Info, commit: str | None, subject: str | None = None) -> None:
        """Set a commit info metric."""
        info.info({"commit": commit or "", "subject": (subject or "")[:200]})

    def record_check(self, check: str, node: str, ok: bool, busbw: float | None, gpu_seconds: float | None) -> None:
        """Export one health-check result."""
        self.check_ok.labels(check=check, node=node).set(1 if ok else 0)
        if busbw is not None:
            self.nccl_busbw.labels(check=check, node=node).set(busbw)
        if gpu_seconds:
            self.check_gpu_seconds.labels(check=check).inc(gpu_seconds)
