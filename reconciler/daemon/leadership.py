"""The daemon's side of a pair (config `ha:`): the lease thread's connection, takeover, the mirrored crash journal.

A standby runs the same loop in report mode: it fetches, validates, plans and records drift, keeps its SSH
sessions warm, and serves status, page and metrics. It never applies, drains or comments. Taking over, it reads
the crash journal the previous leader kept beside the lease (the rollout in flight, follow-ups not yet run, the
commit applied last), adopts it, announces its epoch to every node (so nothing of the predecessor lands after
this point, even on nodes the new leader has nothing to change), and then acts like a restarted single daemon.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import structlog

from reconciler.common import clock
from reconciler.daemon.loop_state import LoopHost
from reconciler.daemon.operator import PairCarrier
from reconciler.daemon.promotion_operator import KEY as PROMOTION_OPERATOR_KEY
from reconciler.daemon.rollouts import JOURNAL_KEY, StoreJournal
from reconciler.daemon.store import PENDING_FOLLOWUPS, Store
from reconciler.desired.inventory import NodeSpec, node_specs
from reconciler.engine.fence import FencingTransport
from reconciler.engine.remote_write import WRITE_COMMAND
from reconciler.ha.lease import LeaseError
from reconciler.ha.role import HA_KEY, HighAvailability, default_name
from reconciler.rollout.journal import RolloutJournal, encode
from reconciler.transport.base import Transport

log = structlog.get_logger("reconciler")


def make_ha(reconciler: LoopHost, wake: threading.Event) -> HighAvailability | None:
    """The pair role of this daemon (None without `ha:` in the config)."""
    cfg = reconciler.config.ha
    if cfg is None:
        return None
    name = cfg.name or default_name()
    listen = reconciler.config.metrics_listen

    @contextlib.contextmanager
    def connect() -> Iterator[tuple[Transport, NodeSpec] | None]:
        loaded = reconciler.ha_loaded
        if loaded is None:
            yield None
            return
        state = loaded.state
        node = cfg.lease_node or state.cluster.controller_names[0]
        spec = node_specs(state).get(node)
        if spec is None:
            raise LeaseError(f"ha.lease_node {node!r} is not a node of the desired state")
        with reconciler.sessions.lease(loaded, reconciler.config.ssh.forks) as transport:
            yield transport, spec

    def changed() -> None:
        reconciler.metrics.set_leader(name, ha.is_leader())
        wake.set()

    def publish(snapshot: dict[str, Any]) -> None:
        reconciler.metrics.set_leader(name, snapshot["role"] == "leader")
        store = Store(reconciler.config.state_path / "state.db")  # any thread: a connection of its own
        try:
            store.set(HA_KEY, snapshot)
        finally:
            store.close()

    ha = HighAvailability(name, cfg.lease_node, cfg.lease_dir, float(cfg.seconds("lease_duration")),
                          float(cfg.seconds("renew_interval")), connect,
                          address=f"http://{listen}" if listen else None, on_change=changed, publish=publish,
                          fence_dir=cfg.fence_dir,
                          operator=PairCarrier(reconciler.config.state_path / "state.db"))
    reconciler.metrics.set_leader(name, False)
    return ha


def fenced(ha: HighAvailability | None, transport: Transport) -> Transport:
    """The transport the leader acts through: every command carries its epoch (unchanged without `ha:`)."""
    if ha is None or isinstance(transport, FencingTransport):
        return transport
    return FencingTransport(transport, ha.fence, ha.fenced, WRITE_COMMAND)  # type: ignore[return-value]


def take_over(reconciler: LoopHost, ha: HighAvailability) -> None:
    """This daemon just became the leader: adopt the predecessor's crash journal, announce the epoch everywhere."""
    epoch = ha.epoch
    journal = ha.journal()  # LeaseError: not acting this cycle (the loop logs it, the next cycle tries again)
    writer = journal.get("writer") or {}
    store = reconciler.store
    rollout = journal.get("rollout")
    followups = journal.get("followups")
    applied = (journal.get("applied") or {}).get("commit")
    if writer:
        store.set(JOURNAL_KEY, rollout)
        store.set(PENDING_FOLLOWUPS, followups)
    for commit, mark in (journal.get("rolled_back") or {}).items():
        if commit not in store.rolled_back():
            store.mark_rolled_back(commit, mark)  # the predecessor's gate failed on it: not applied again
    if isinstance(journal.get(PROMOTION_OPERATOR_KEY), dict):  # the operator's promotion commands (approvals, hold)
        store.set(PROMOTION_OPERATOR_KEY, journal[PROMOTION_OPERATOR_KEY])
    if applied and applied != reconciler.state.applied:
        reconciler.state.applied = applied
        reconciler.state.applied_target = None
        store.set("applied_commit", applied)
    loaded = reconciler.ha_loaded
    announced: dict[str, str] = {}
    if loaded is not None:
        specs = list(node_specs(loaded.state).values())
        with reconciler.sessions.lease(loaded, reconciler.config.ssh.forks) as transport:
            results = fenced(ha, transport).run_many(specs, "true")
        announced = {name: result.describe() for name, result in results.items() if not result.ok}
    log.warning("ha.took_over", epoch=epoch, previous=writer.get("holder"), previous_epoch=writer.get("epoch"),
                rollout_in_flight=bool(rollout), followups=len(followups or []), applied=(applied or "")[:12],
                not_announced=announced or None)
    store.set("ha_takeover", {"epoch": epoch, "at": clock.wall(), "previous": writer, "rollout": bool(rollout),
                              "followups": len(followups or []), "not_announced": announced})


def mirror(ha: HighAvailability | None, entries: dict[str, Any], *, required: bool) -> None:
    """Copy crash-journal entries beside the lease; REQUIRED: raise if that fails (do not act unjournaled)."""
    if ha is None or not ha.is_leader():
        return
    try:
        ha.save(entries)
    except LeaseError as exc:
        if required:
            raise
        log.warning("ha.journal_failed", error=str(exc), entries=sorted(entries))


class MirroredJournal(StoreJournal):
    """The rollout journal, in the state database and beside the lease (where a successor reads it)."""

    def __init__(self, store: Store, ha: HighAvailability | None) -> None:
        super().__init__(store)
        self.ha = ha

    def save(self, journal: RolloutJournal) -> None:
        """Record the rollout in flight here and on the lease node (LeaseError stops the rollout)."""
        super().save(journal)
        mirror(self.ha, {"rollout": encode(journal)}, required=True)

    def clear(self) -> None:
        """The rollout ended."""
        super().clear()
        mirror(self.ha, {"rollout": None}, required=False)
