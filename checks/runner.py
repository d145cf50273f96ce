"""Run the health checks of a desired state: node checks, then NCCL runs; record results; drain and resume.

`run_checks` is what the daemon calls (after an apply, on a check's interval) and what `reconciler check`
calls. The order is: Slurm's view from the controller, node checks (one command per node), their actions,
then each NCCL check with a fresh view (so a node just drained by a node check is not benchmarked), its
runs on the login node, its actions, and the release of the reservation used for retests.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from reconciler.checks import store
from reconciler.checks.actions import Action, Key, Policy, apply_actions, owns, plan_actions
from reconciler.checks.nccl.run import (
    IMMEDIATE,
    KILL_AFTER,
    NcclPlan,
    nccl_targets,
    plan_nccl,
    reservation_create_command,
    reservation_delete_command,
    run_local,
    run_waves,
)
from reconciler.checks.node import run_node_checks, targets
from reconciler.checks.results import CheckResult
from reconciler.checks.slurm_view import SlurmView, fetch_view
from reconciler.desired.inventory import NodeSpec, node_specs
from reconciler.desired.loader import LoadedState
from reconciler.model import DesiredState, NcclCheck, NodeCheck, parse_duration
from reconciler.transport.base import Transport

Log = Callable[[str], None]
MAX_DRAIN_FRACTION = 0.5


class UnknownCheckError(ValueError):
    """A check name that the desired state does not define."""


class ChecksCancelled(Exception):
    """SHOULD_STOP said stop: results of the interrupted check are dropped (no drain, nothing recorded)."""


@dataclass
class CheckRun:
    """Everything one run of the checks produced: results (in order) and the drains/resumes decided."""

    results: list[CheckResult] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no result failed or errored."""
        return all(r.ok for r in self.results)


def select_checks(state: DesiredState, names: list[str] | None) -> tuple[list[NodeCheck], list[NcclCheck]]:
    """The node and NCCL checks named (all when NAMES is None); raise UnknownCheckError for a name not defined."""
    node_checks, nccl_checks = state.checks.node, state.checks.nccl
    if names is None:
        return list(node_checks), list(nccl_checks)
    known = {c.name for c in node_checks} | {c.name for c in nccl_checks}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownCheckError(f"unknown check(s) {', '.join(unknown)}; defined: {', '.join(sorted(known)) or 'none'}")
    return [c for c in node_checks if c.name in names], [c for c in nccl_checks if c.name in names]


def launcher_of(state: DesiredState) -> NodeSpec:
    """Where sruns are started: the first node with the login role, else the primary controller."""
    specs = node_specs(state)
    logins = [spec for spec in specs.values() if spec.has_role("login")]
    return logins[0] if logins else specs[state.cluster.controller_names[0]]


def _max_drains(total: int, fraction: float) -> int:
    """How many of TOTAL nodes one check may drain in a run: at least one."""
    return max(1, math.floor(total * fraction))


def policies_of(state: DesiredState, view: SlurmView, fraction: float = MAX_DRAIN_FRACTION) -> dict[Key, Policy]:
    """How every check of the state may act: drain_on_fail (never for partition-wide runs) and a drain cap."""
    specs = node_specs(state)
    policies = {("node", c.name): Policy(c.drain_on_fail, _max_drains(len(targets(c, specs, None)), fraction),
                                         gpu=c.gpus is not None)
                for c in state.checks.node}
    policies.update({("nccl", c.name): Policy(c.drain_on_fail and c.mode not in ("partition", "local"),
                                              _max_drains(len(nccl_targets(c, state, view)), fraction))
                     for c in state.checks.nccl})
    return policies


def check_run(loaded: LoadedState, transport: Transport, conn: sqlite3.Connection | None = None,
              names: list[str] | None = None, nodes: set[str] | None = None, log: Log = lambda _: None, *,
              act: bool = True, max_drain_fraction: float = MAX_DRAIN_FRACTION,
              should_stop: Callable[[], bool] = lambda: False) -> CheckRun:
    """Run the checks and return results and actions (see run_checks)."""
    state = loaded.state
    node_checks, nccl_checks = select_checks(state, names)
    specs = node_specs(state)
    controller = specs[state.cluster.controller_names[0]]
    if conn is not None:
        store.ensure_schema(conn)
    outcome = CheckRun()
    if node_checks:
        view = fetch_view(transport, controller)
        results = run_node_checks(state, transport, node_checks, view, nodes, log, conn)
        _stop_if(should_stop)
        _settle(outcome, results, view, policies_of(state, view, max_drain_fraction), transport, controller, conn,
                act, log)
    for check in nccl_checks:
        _stop_if(should_stop)
        if check.mode == "local":
            _run_local(outcome, check, state, transport, conn, nodes, log, should_stop)
        else:
            _run_nccl(outcome, check, state, transport, controller, conn, nodes, act, max_drain_fraction, log,
                      should_stop)
    return outcome


def _stop_if(should_stop: Callable[[], bool]) -> None:
    if should_stop():
        raise ChecksCancelled("checks cancelled")


def run_checks(loaded: LoadedState, transport: Transport, conn: sqlite3.Connection | None = None,
               names: list[str] | None = None, nodes: set[str] | None = None, log: Log = lambda _: None, *,
               act: bool = True, max_drain_fraction: float = MAX_DRAIN_FRACTION,
               should_stop: Callable[[], bool] = lambda: False) -> list[CheckResult]:
    """Run node and NCCL checks (NAMES: only these; NODES: only on these), record to CONN, drain and resume.

    With act=False nothing is drained, resumed or reserved (actions are still decided and logged). A check
    failing on more than MAX_DRAIN_FRACTION of its nodes (at least one node always may be) drains none.
    Raises UnknownCheckError for a name the desired state does not define. SHOULD_STOP is asked between
    steps: when it says stop, the check in flight is abandoned before it records or acts (its reservation is
    deleted, retest nodes are drained again) and ChecksCancelled is raised.
    """
    return check_run(loaded, transport, conn, names, nodes, log, act=act,
                     max_drain_fraction=max_drain_fraction, should_stop=should_stop).results


def _settle(outcome: CheckRun, results: list[CheckResult], view: SlurmView, policies: dict[tuple[str, str], Policy],
            transport: Transport, controller: NodeSpec, conn: sqlite3.Connection | None, act: bool,
            log: Log) -> None:
    """Record results, decide actions against the view and the latest known results, carry them out."""
    others = store.latest(conn) if conn is not None else []
    if conn is not None:
        store.record_many(conn, results)
    actions = plan_actions(results, view, policies, others)
    if act:
        apply_actions(transport, controller, actions, view, log)
    else:
        for action in actions:
            log(f"would {action.line()}")
    outcome.results += results
    outcome.actions += actions
    for kind in sorted({r.kind for r in results}):
        mine = [r for r in results if r.kind == kind]
        counts = {s: sum(r.status == s for r in mine) for s in ("PASS", "FAIL", "ERROR", "SKIP")}
        log(f"{kind} checks: " + ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n))


def _blocked(outcome: CheckRun, conn: sqlite3.Connection | None, check: NcclCheck,
             policies: dict[Key, Policy]) -> dict[str, str]:
    """Nodes on which another draining check still fails (latest known result): no retest of this check there."""
    latest = {(r.kind, r.check, r.node): r for r in (store.latest(conn) if conn is not None else [])}
    latest.update({(r.kind, r.check, r.node): r for r in outcome.results})
    return {r.node: r.check for r in latest.values()
            if r.failed and (r.kind, r.check) != ("nccl", check.name)
            and policies.get((r.kind, r.check), Policy(False)).drain_on_fail}


def _run_nccl(outcome: CheckRun, check: NcclCheck, state: DesiredState, transport: Transport, controller: NodeSpec,
              conn: sqlite3.Connection | None, nodes: set[str] | None, act: bool, fraction: float,
              log: Log, should_stop: Callable[[], bool] = lambda: False) -> None:
    """One NCCL check: plan against a fresh view, hold retest nodes, run, settle, release."""
    view = fetch_view(transport, controller)
    policies = policies_of(state, view, fraction)
    plan = plan_nccl(check, state, view, nodes, act=act, owns=lambda reason: owns("nccl", check.name, reason),
                     blocked=_blocked(outcome, conn, check, policies))
    reasons = {n: view.nodes[n].reason for n in plan.retest}  # the drains a retest lifts, restored on a crash
    reservation, held, failed = _hold(plan, transport, controller, view, log)
    outcome.actions += held
    settled = False

    def history(node: str) -> list[float]:
        if conn is None:
            return []
        return store.history(conn, check.name, node, check.thresholds.regression_window)

    try:
        log(f"nccl {check.name}: {len(plan.run)} to run, {len(plan.retest)} to retest, {len(plan.skipped)} skipped")
        results = plan.skipped + failed
        results += run_waves(transport, launcher_of(state), plan, reservation=reservation, history=history,
                             batch=state.ssh.forks, log=log, should_stop=should_stop)
        _stop_if(should_stop)
        _settle(outcome, results, view, policies, transport, controller, conn, act, log)
        settled = True
    finally:
        if not settled:  # something broke mid-run: put the lifted drains back before the reservation goes
            redrain = [Action(a.node, "drain", check.name, reasons[a.node], "restored after an interrupted retest")
                       for a in held if a.done and reasons.get(a.node)]
            apply_actions(transport, controller, redrain, view, log)
        if reservation:
            released = transport.run(controller, reservation_delete_command(reservation))
            log(f"released reservation {reservation}" if released.ok
                else f"could not delete reservation {reservation}: {released.describe()}")


def _run_local(outcome: CheckRun, check: NcclCheck, state: DesiredState, transport: Transport,
               conn: sqlite3.Connection | None, nodes: set[str] | None, log: Log,
               should_stop: Callable[[], bool] = lambda: False) -> None:
    """One NCCL check in local mode: no Slurm (no view, reservation or drain); results are recorded."""
    specs = node_specs(state)
    targets = nccl_targets(check, state, SlurmView(), nodes)
    unknown = [CheckResult(check=check.name, kind="nccl", node=n, ok=False, error=True,
                           message="not run: node not in the desired state") for n in targets if n not in specs]

    def history(node: str) -> list[float]:
        return store.history(conn, check.name, node, check.thresholds.regression_window) if conn is not None else []

    log(f"nccl {check.name}: {len(targets) - len(unknown)} to run locally (no Slurm)")
    results = unknown + run_local(transport, [specs[n] for n in targets if n in specs], check, history=history,
                                  log=log)
    _stop_if(should_stop)
    if conn is not None:
        store.record_many(conn, results)
    outcome.results += results


def _hold(plan: NcclPlan, transport: Transport, controller: NodeSpec, view: SlurmView,
          log: Log) -> tuple[str | None, list[Action], list[CheckResult]]:
    """Reserve the retest groups' nodes for root and resume the retest nodes inside the reservation.

    Returns the reservation's name (None when not needed or refused), the resume actions, and error results
    for retest nodes that could not be held (their groups are dropped from the plan).
    """
    nodes = plan.reserve
    if not nodes:
        return None, [], []
    check = plan.check
    name = f"reconciler-{check.name}-{int(time.time())}"
    per_wave = parse_duration(check.timeout) + IMMEDIATE + KILL_AFTER
    minutes = math.ceil(per_wave * len(plan.waves) / 60) + 5  # expires by itself should we die mid-run
    created = transport.run(controller, reservation_create_command(name, nodes, minutes))
    bad: dict[str, str] = {}
    actions: list[Action] = []
    if not created.ok:
        bad = {n: f"not retested: reservation refused: {created.describe()}" for n in plan.retest}
        name_or_none: str | None = None
    else:
        name_or_none = name
        log(f"reserved {','.join(nodes)} as {name} for {minutes} min")
        resumes = [Action(n, "resume", check.name, note=f"retest of {check.name} inside reservation {name}")
                   for n in plan.retest]
        apply_actions(transport, controller, resumes, view, log)
        actions = resumes
        bad = {a.node: f"not retested: resume failed: {a.error}" for a in resumes if a.error}
    refused = set(bad)
    for wave in plan.waves:
        for group in [g for g in wave if set(g.nodes) & refused]:
            wave.remove(group)
            partner = ",".join(n for n in group.nodes if n in refused)
            bad.update({n: f"not run: {partner} could not be held" for n in group.judged if n not in bad})
    failed = [CheckResult(check=check.name, kind="nccl", node=n, ok=False, error=True, message=why)
              for n, why in bad.items()]
    return name_or_none, actions, failed
