"""Prometheus metrics of the daemon (prometheus-client, own registry) and the listener on metrics_listen.

The listener serves `/metrics` and, when the daemon gives it one, the read-only status page at `/`; it answers
GET and HEAD only.

GPU faults (`reconciler_gpu_fault{node,gpu,kind}`, and the status page's table) are read from the latest result of
every node check (`gpu_faults`): a failed item whose message `reconciler.checks.gpu.judge.fault_of` reads.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from reconciler.checks.gpu.judge import fault_of
from reconciler.engine.plan import Change

if TYPE_CHECKING:
    from reconciler.checks.results import CheckResult


@dataclass(frozen=True)
class GpuFault:
    """One GPU fault in the latest result of a node check: gpu '' for the node's GPUs as a whole."""

    node: str
    gpu: str
    kind: str
    message: str
    check: str
    started: datetime


def gpu_faults(results: Iterable[CheckResult]) -> list[GpuFault]:
    """The GPU faults in RESULTS (the latest result of each check on each node), sorted by node, GPU and kind.

    Node checks only; a detail line is `<status>: <message>` and only `fail` items whose message is a GPU fault
    count, so a fault goes away with the next result that no longer reports it.
    """
    faults = []
    for result in results:
        if result.kind != "node":
            continue
        for line in result.details:
            status, sep, message = line.partition(": ")
            found = fault_of(message) if sep and status == "fail" else None
            if found is not None:
                faults.append(GpuFault(result.node, found[0], found[1], message, result.check, result.started))
    return sorted(faults, key=lambda f: (f.node, _gpu_order(f.gpu), f.kind, f.check))


def _gpu_order(gpu: str) -> tuple[int, int, str]:
    """GPU 2 before GPU 10; the node's GPUs as a whole ('') first, PCI addresses last."""
    return (1, int(gpu), "") if gpu.isdigit() else (0 if gpu == "" else 2, 0, gpu)


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
        self.leader = Gauge("reconciler_leader", "1 on the daemon of a pair that holds the lease (acts), 0 on the "
                            "standby", ["node"], registry=r)
        self.unreachable = Gauge("reconciler_unreachable_nodes", "Nodes that could not be reached in the last run",
                                 registry=r)
        self.check_ok = Gauge("reconciler_check_ok", "1 when the health check passed on the node",
                              ["check", "node"], registry=r)
        self.nccl_busbw = Gauge("reconciler_nccl_busbw_gbps", "Bus bandwidth measured by the NCCL check (GB/s)",
                                ["check", "node"], registry=r)
        self.drained = Gauge("reconciler_node_drained", "1 for a node Slurm reports draining or drained; by: "
                             "reconciler (its reason starts with `reconciler:`) or other", ["node", "by"], registry=r)
        self.drift_interval = Gauge("reconciler_drift_interval_seconds", "The configured drift_interval: the daemon "
                                    "reconciles at least this often", registry=r)
        self.ssh_connects = Counter("reconciler_ssh_connects", "SSH connections opened to nodes (with persistent "
                                    "sessions: first contact and reconnects only)", registry=r)
        self.check_gpu_seconds = Counter("reconciler_check_gpu_seconds_total", "GPU-seconds spent on health checks",
                                         ["check"], registry=r)
        self.rollout_wave = Gauge("reconciler_rollout_wave", "The wave a rollout is applying or gating (0: none in "
                                  "flight)", registry=r)
        self.rollout_waves = Gauge("reconciler_rollout_waves", "How many waves the rollout in flight has", registry=r)
        self.rollbacks = Counter("reconciler_rollbacks", "Commits rolled back, by the gate that failed",
                                 ["gate"], registry=r)
        self.gpu_fault = Gauge("reconciler_gpu_fault", "1 for each GPU fault in the latest result of a node check "
                               "(gpu: its index, empty for the node's GPUs as a whole; kind: xid, ecc, nvlink, ...)",
                               ["node", "gpu", "kind"], registry=r)
        self.gpu_rma = Gauge("reconciler_gpu_rma_candidate", "1 for each GPU that meets an RMA rule of checks.fleet "
                             "(gpu: its index on the node; only candidates are exported)",
                             ["node", "gpu", "uuid", "rule"], registry=r)
        self.gpu_score = Gauge("reconciler_gpu_health_score", "Each GPU's fleet score: 0 healthy, higher worse, "
                               ">= 1000 an RMA candidate (reconciler gpus)", ["node", "gpu"], registry=r)
        self.node_upgrade_state = Gauge("reconciler_node_upgrade_state", "Per node of a reboot-aware upgrade (the "
                                        "one in flight, else the last): 1 for its current state, 0 for the others",
                                        ["node", "state"], registry=r)
        self._upgrade_lock = threading.Lock()

    def serve(self, listen: str, page: Callable[[], str] | None = None,
              runs: Callable[[int], str] | None = None, upgrade: Callable[[], dict[str, Any] | None] | None = None,
              promotion: Callable[[], str] | None = None) -> Any:
        """Serve /metrics (PAGE's HTML at /, RUNS' JSON at /runs.json, PROMOTION's at /promotion.json) on host:port
        in a thread; return the server.

        UPGRADE, when given, is read at each scrape (the upgrade's journal record) for reconciler_node_upgrade_state.
        """
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        refresh = (lambda: self.set_upgrade(upgrade())) if upgrade is not None else None
        app = wsgi_app(self.registry, page, runs, refresh, self._upgrade_lock, promotion)
        httpd = make_server(host, int(port), app, Server, handler_class=_QuietHandler)
        threading.Thread(target=httpd.serve_forever, daemon=True, name="metrics-http").start()
        return httpd

    def set_drift(self, changes: list[Change], nodes: list[str], drivers: list[str]) -> None:
        """Set the drifted-resource gauge for every node and driver (zeros included)."""
        tally = Tally((c.node, c.driver) for c in changes if c.changing)
        self.drifted.clear()
        for node, driver in {(n, d) for n in nodes for d in drivers} | tally.keys():
            self.drifted.labels(node=node, driver=driver).set(tally.get((node, driver), 0))

    def set_leader(self, node: str, leader: bool) -> None:
        """This daemon's role in a pair (reconciler_leader{node})."""
        self.leader.labels(node=node).set(1 if leader else 0)

    def set_drained(self, drained: dict[str, str | None]) -> None:
        """Set the drained-node gauge: node -> its drain reason (only drained nodes are exported)."""
        self.drained.clear()
        for node, reason in drained.items():
            by = "reconciler" if (reason or "").startswith("reconciler:") else "other"
            self.drained.labels(node=node, by=by).set(1)

    def set_gpu_faults(self, results: Iterable[CheckResult]) -> None:
        """Set the GPU fault gauge from the latest check results (`store.latest`): only faults present are exported."""
        faults = {(f.node, f.gpu, f.kind) for f in gpu_faults(results)}
        self.gpu_fault.clear()
        for node, gpu, kind in sorted(faults):
            self.gpu_fault.labels(node=node, gpu=gpu, kind=kind).set(1)

    def set_gpu_fleet(self, standings: Iterable[Any]) -> None:
        """Set the per-GPU score and RMA gauges from the fleet's standings (checks/fleet/rank.py)."""
        self.gpu_rma.clear()
        self.gpu_score.clear()
        for s in standings:
            self.gpu_score.labels(node=s.node, gpu=str(s.index)).set(s.score)
            for hit in s.rma:
                self.gpu_rma.labels(node=s.node, gpu=str(s.index), uuid=s.uuid, rule=hit.rule).set(1)

    def set_upgrade(self, upgrade: dict[str, Any] | None) -> None:
        """Set reconciler_node_upgrade_state from an upgrade record (`record["upgrade"]`; None: no series)."""
        from reconciler.daemon.upgrade_view import metric_series

        self.node_upgrade_state.clear()
        for (node, state), value in sorted(metric_series(upgrade).items()):
            self.node_upgrade_state.labels(node=node, state=state).set(value)

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


SECURITY_HEADERS = [("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:"),
                    ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
                    ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-store")]


def wsgi_app(registry: CollectorRegistry, page: Callable[[], str] | None,
             runs: Callable[[int], str] | None = None, refresh: Callable[[], None] | None = None,
             lock: threading.Lock | None = None, promotion: Callable[[], str] | None = None
             ) -> Callable[..., Iterable[bytes]]:
    """The listener's WSGI app: /metrics, / the status page, /runs.json (for a pair's peer), /promotion.json (for
    the next cluster's daemon: reconciler/daemon/promotion_http.py); read-only.

    REFRESH runs before each /metrics answer (under LOCK, so two scrapes never see each other's half-set gauge).
    """
    metrics = make_wsgi_app(registry)
    lock = lock or threading.Lock()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO") or "/", environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")])
            return [b"read-only\n"]
        if path == "/metrics":
            with lock:
                if refresh is not None:
                    # an unreadable journal must not take /metrics down: the gauge then keeps its last values
                    with contextlib.suppress(Exception):
                        refresh()
                return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path in ("/", "/index.html") and page is not None:
            try:
                body = page().encode()
                status = "200 OK"
            except Exception as exc:  # noqa: BLE001 - a broken page must not take /metrics down
                body = f"status page unavailable: {type(exc).__name__}\n".encode()
                status = "500 Internal Server Error"
            start_response(status, [("Content-Type", "text/html; charset=utf-8" if status == "200 OK" else
                                     "text/plain"), ("Content-Length", str(len(body))), *SECURITY_HEADERS])
            return [] if method == "HEAD" else [body]
        if path == "/runs.json" and runs is not None:
            query = environ.get("QUERY_STRING") or ""
            limit = int(query[6:]) if query.startswith("limit=") and query[6:].isdigit() else 20
            try:
                body, status = runs(min(limit, 500)).encode(), "200 OK"
            except Exception as exc:  # noqa: BLE001
                body, status = f"runs unavailable: {type(exc).__name__}\n".encode(), "500 Internal Server Error"
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [] if method == "HEAD" else [body]
        if path == "/promotion.json" and promotion is not None:
            try:
                body, status = promotion().encode(), "200 OK"
            except Exception as exc:  # noqa: BLE001 - the next cluster then waits and says why
                body, status = f"promotion unavailable: {type(exc).__name__}\n".encode(), "500 Internal Server Error"
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [] if method == "HEAD" else [body]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try / or /metrics\n"]

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (the daemon's stderr is its JSON log)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        """Drop the line."""
