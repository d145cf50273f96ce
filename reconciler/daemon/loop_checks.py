"""The reconcile loop's health checks of the last reconciled state: which are due, running them, recording what
they drained (and what Slurm says is drained after a cycle's gather)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from reconciler.checks import store as check_store
from reconciler.common import clock
from reconciler.daemon import notify
from reconciler.daemon.loop_core import Common, Notices, step_fields
from reconciler.daemon.status_page import DRAINED_KEY
from reconciler.daemon.store import Store
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import LoadedState
from reconciler.facts.models import SlurmNodeFact
from reconciler.model import DesiredState
from reconciler.transport.base import Transport


class HealthChecks:
    """The health checks of the last reconciled state: which are due, running them (in the check worker, or inline
    after a --once cycle), and what Slurm says is drained after them."""

    def __init__(self, common: Common, notices: Notices) -> None:
        self.common, self.notices = common, notices
        self.target: LoadedState | None = None  # what the check worker checks: the last reconciled state
        self.attempts: dict[str, datetime] = {}
        self.started_at: dict[str, float] = {}  # check -> time.monotonic() when this process last started it

    def due(self, store: Store | None = None) -> list[str]:
        """Health checks of the last reconciled state whose interval or schedule has come."""
        if self.target is None or not (self.target.state.checks.node or self.target.state.checks.nccl):
            return []
        from reconciler.checks import store as check_store
        from reconciler.checks.schedule import due_checks

        last = check_store.last_started((store or self.common.store).conn)
        for name, when in self.attempts.items():  # a check that recorded nothing is not retried at once
            last[name] = max(last.get(name, when), when)
        now = time.monotonic()  # intervals since this process started a check: immune to wall-clock jumps
        ago = {name: now - started for name, started in self.started_at.items()}
        return due_checks(self.target.state, last, clock.utcnow(), ago)

    def run(self, transport: Transport, loaded: LoadedState, names: list[str] | None, why: str,
            store: Store, should_stop: Callable[[], bool]) -> None:
        """Run health checks over TRANSPORT; record (in STORE), export, drain/resume as they decide."""
        from reconciler.checks.runner import ChecksCancelled, check_run

        state = loaded.state
        if not (state.checks.node or state.checks.nccl) or should_stop():
            return
        log = self.common.log.bind(commit=(loaded.commit or "")[:12])
        log.info("checks.start", reason=why, checks=names or "all")
        now = clock.utcnow()
        attempted = names or [c.name for c in state.checks.node] + [c.name for c in state.checks.nccl]
        for name in attempted:
            self.attempts[name] = now
            self.started_at[name] = time.monotonic()
        try:
            checked = check_run(loaded, transport, store.conn, names=names,
                                log=lambda line: log.info("check.step", **step_fields(line)),
                                should_stop=should_stop)
            results = checked.results
        except ChecksCancelled:
            for name in attempted:  # nothing recorded: due again as soon as nothing stops them
                self.attempts.pop(name, None)
                self.started_at.pop(name, None)
            log.info("checks.cancelled", reason="daemon stopping" if self.common.stop.is_set() else "apply")
            return
        except Exception as exc:  # noqa: BLE001 - a broken check must not stop reconciling
            log.exception("checks.error", error=f"{type(exc).__name__}: {exc}")
            return
        # results first: the metrics must not wait for the controller's answer below or a slow notifier
        for result in results:
            if result.skipped:
                continue
            self.common.metrics.record_check(result.check, result.node, result.ok, result.value, result.gpu_seconds)
            (log.info if result.ok else log.warning)("check.result", check=result.check, node=result.node,
                                                      ok=result.ok, message=result.message, busbw=result.value)
        self.common.metrics.set_gpu_faults(check_store.latest(store.conn))
        self._fleet(state, store, log)
        if any(not r.skipped for r in results):
            self._refresh_drained(transport, state, store)
        drains = [(a.node, a.check, a.reason) for a in checked.actions if a.kind == "drain" and a.done]
        if drains:
            self.notices.send(lambda: notify.drained_message(drains, state.cluster.name))

    def _fleet(self, state: DesiredState, store: Store, log: Any) -> None:
        """The fleet's standings after a check: per-GPU metrics, and a message for each new RMA candidate."""
        from reconciler.checks.fleet import store as fleet_store
        from reconciler.checks.fleet.rank import standings

        try:
            ranked = standings(store.conn, clock.wall(), state.checks.fleet)
            new = fleet_store.sync_candidates(store.conn, {s.uuid: [(h.rule, h.since, h.detail) for h in s.rma]
                                                           for s in ranked if s.rma})
        except sqlite3.OperationalError as exc:  # no GPU history (no GPU check has run)
            log.debug("fleet.none", error=str(exc))
            return
        self.common.metrics.set_gpu_fleet(ranked)
        if new:
            hits = {s.uuid: s for s in ranked}
            found = [(hits[u], next(h for h in hits[u].rma if h.rule == r)) for u, r in new]
            for standing, hit in found:
                log.warning("fleet.rma_candidate", node=standing.node, gpu=standing.index, uuid=standing.uuid,
                            rule=hit.rule, detail=hit.detail)
            self.notices.send(lambda: notify.rma_message(found, state.cluster.name))

    def record_drained(self, nodes: dict[str, SlurmNodeFact], error: str | None, store: Store | None = None,
                        asked: float | None = None) -> None:
        """Keep Slurm's draining/drained nodes and their reasons for the status page and an ended upgrade's present
        states (not when Slurm did not answer); ASKED: when the view was asked for (it is at least that new)."""
        if error or not nodes:
            return
        drained = [{"node": n.name, "state": n.state, "reason": n.reason} for n in nodes.values() if n.drained]
        (store or self.common.store).set(DRAINED_KEY, {"at": clock.wall(), "asked": asked,
                                                "nodes": sorted(drained, key=lambda d: d["node"])})
        self.common.metrics.set_drained({n.name: n.reason for n in nodes.values() if n.drained})

    def _refresh_drained(self, transport: Transport, state: DesiredState, store: Store) -> None:
        """Checks may have drained or resumed nodes: ask the controller again (one command)."""
        from reconciler.checks.slurm_view import fetch_view

        controller = node_specs(state).get(state.cluster.controllers[0])
        if controller is not None:
            asked = clock.wall()
            view = fetch_view(transport, controller)
            self.record_drained(view.nodes, view.error, store, asked=asked)
