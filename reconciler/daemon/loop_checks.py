"""The reconcile loop's schedules: when a drift check or retry is due, and the health checks of the last
reconciled state (which are due, running them, recording what they drained)."""

from __future__ import annotations

import time
from collections.abc import Callable

from reconciler.checks import store as check_store
from reconciler.common import clock
from reconciler.daemon import notify
from reconciler.daemon.loop_core import LoopCore, step_fields
from reconciler.daemon.status_page import DRAINED_KEY
from reconciler.daemon.store import Store
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import LoadedState
from reconciler.facts.models import SlurmNodeFact
from reconciler.model import DesiredState
from reconciler.transport.base import Transport


class Schedules(LoopCore):
    """Drift and retry timing, and health checks (run by the check worker, or inline after a --once cycle)."""

    def due(self, now: float) -> bool:
        """True when the drift interval or a retry says a reconcile is due without a new commit (NOW: monotonic).

        Intervals are measured on time.monotonic(), never on the wall clock: a clock set back or forward (NTP
        stepping it, an admin) neither stops drift checks for the length of the jump nor fires them at once.
        Health checks and PR reports have their own schedule in the workers (reconciler/daemon/workers.py).
        """
        if self.state.retry_at and now >= self.state.retry_at:
            return True
        last = self.state.last_reconcile
        return last is None or now - last >= self.config.seconds("drift_interval")

    def next_wake(self, now: float) -> float:
        """Seconds until the next drift check or retry (NOW: time.monotonic())."""
        last = self.state.last_reconcile
        times = [now if last is None else last + self.config.seconds("drift_interval")]
        if self.state.retry_at:
            times.append(self.state.retry_at)
        return max(0.0, min(times) - now)

    def due_checks(self, store: Store | None = None) -> list[str]:
        """Health checks of the last reconciled state whose interval or schedule has come."""
        if self.last_state is None or not (self.last_state.checks.node or self.last_state.checks.nccl):
            return []
        from reconciler.checks import store as check_store
        from reconciler.checks.schedule import due_checks

        last = check_store.last_started((store or self.store).conn)
        for name, when in self.check_attempts.items():  # a check that recorded nothing is not retried at once
            last[name] = max(last.get(name, when), when)
        now = time.monotonic()  # intervals since this process started a check: immune to wall-clock jumps
        ago = {name: now - started for name, started in self.check_clock.items()}
        return due_checks(self.last_state, last, clock.utcnow(), ago)

    def run_checks(self, transport: Transport, loaded: LoadedState, names: list[str] | None, why: str,
                   store: Store, should_stop: Callable[[], bool]) -> None:
        """Run health checks over TRANSPORT; record (in STORE), export, drain/resume as they decide."""
        from reconciler.checks.runner import ChecksCancelled, check_run

        state = loaded.state
        if not (state.checks.node or state.checks.nccl) or should_stop():
            return
        log = self.log.bind(commit=(loaded.commit or "")[:12])
        log.info("checks.start", reason=why, checks=names or "all")
        now = clock.utcnow()
        attempted = names or [c.name for c in state.checks.node] + [c.name for c in state.checks.nccl]
        for name in attempted:
            self.check_attempts[name] = now
            self.check_clock[name] = time.monotonic()
        try:
            checked = check_run(loaded, transport, store.conn, names=names,
                                log=lambda line: log.info("check.step", **step_fields(line)),
                                should_stop=should_stop)
            results = checked.results
        except ChecksCancelled:
            for name in attempted:  # nothing recorded: due again as soon as nothing stops them
                self.check_attempts.pop(name, None)
                self.check_clock.pop(name, None)
            log.info("checks.cancelled", reason="daemon stopping" if self.stop.is_set() else "apply")
            return
        except Exception as exc:  # noqa: BLE001 - a broken check must not stop reconciling
            log.exception("checks.error", error=f"{type(exc).__name__}: {exc}")
            return
        # results first: the metrics must not wait for the controller's answer below or a slow notifier
        for result in results:
            if result.skipped:
                continue
            self.metrics.record_check(result.check, result.node, result.ok, result.value, result.gpu_seconds)
            (log.info if result.ok else log.warning)("check.result", check=result.check, node=result.node,
                                                      ok=result.ok, message=result.message, busbw=result.value)
        self.metrics.set_gpu_faults(check_store.latest(store.conn))
        if any(not r.skipped for r in results):
            self._refresh_drained(transport, state, store)
        drains = [(a.node, a.check, a.reason) for a in checked.actions if a.kind == "drain" and a.done]
        if drains:
            self._notify(lambda: notify.drained_message(drains, state.cluster.name))

    def _record_drained(self, nodes: dict[str, SlurmNodeFact], error: str | None, store: Store | None = None,
                        asked: float | None = None) -> None:
        """Keep Slurm's draining/drained nodes and their reasons for the status page and an ended upgrade's present
        states (not when Slurm did not answer); ASKED: when the view was asked for (it is at least that new)."""
        if error or not nodes:
            return
        drained = [{"node": n.name, "state": n.state, "reason": n.reason} for n in nodes.values() if n.drained]
        (store or self.store).set(DRAINED_KEY, {"at": clock.wall(), "asked": asked,
                                                "nodes": sorted(drained, key=lambda d: d["node"])})
        self.metrics.set_drained({n.name: n.reason for n in nodes.values() if n.drained})

    def _refresh_drained(self, transport: Transport, state: DesiredState, store: Store) -> None:
        """Checks may have drained or resumed nodes: ask the controller again (one command)."""
        from reconciler.checks.slurm_view import fetch_view

        controller = node_specs(state).get(state.cluster.controllers[0])
        if controller is not None:
            asked = clock.wall()
            view = fetch_view(transport, controller)
            self._record_drained(view.nodes, view.error, store, asked=asked)
