"""Changes that need a reboot or a driver reload, node by node: the per-node state machine of an upgrade.

Each node goes upgrade-required -> draining -> waiting-for-jobs -> applying -> rebooting | reloading -> validating
-> done, or ends `failed` (kept drained with the reason). Its state is journalled in the rollout journal's `upgrade`
part (reconciler/rollout/journal.py: the states and their transition table) BEFORE each step, so a killed process
resumes every node where it was: a node in `rebooting` whose boot id already changed goes on to `validating`, and a
node is resumed only while the upgrade's own drain holds it (once). At most `max_unavailable` nodes are out at a
time; past `failure_budget` failed nodes no new node starts and every node the upgrade reached is rolled back (its
before-image undo, then a reboot or reload again): `rolling-back` -> `rolled-back`, or `rollback-failed` (kept
drained, the reason naming the step that failed; final: a human takes it from there, no later pass tries it again).

The machine knows nothing of Slurm or packages: how a node is drained, rebooted and seen back is `DrainSteps`
data (drivers/slurm_reboot.py), what is applied and gated are the caller's hooks (engine/upgrade_steps.py `Hooks`;
checks/upgrade_gates.py builds them for the real engine and gates).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from reconciler.common.failpoints import failpoint
from reconciler.desired.inventory import NodeSpec
from reconciler.engine.drain import DrainSteps, NodeDrain, wait_until
from reconciler.engine.upgrade_steps import Hooks, Prepared
from reconciler.model.bounds import parse_duration
from reconciler.model.upgrade import Upgrade, scaled
from reconciler.rollout.admission import GO, Admission, OwnCount, Verdict
from reconciler.rollout.journal import (
    FINAL,
    STATES,
    Journal,
    NodeEntry,
    NodeWork,
    OperatorAct,
    RolloutJournal,
    UpgradeRecord,
    Waiting,
)
from reconciler.rollout.journal import UpgradeState as S
from reconciler.rollout.operator import Desk, NoDesk, retried
from reconciler.rollout.reservation import Taking, hold
from reconciler.rollout.upgrade_outcome import NodeFailed, UpgradeOutcome
from reconciler.transport.base import Transport

__all__ = ["FINAL", "STATES", "Hooks", "NodeFailed", "Prepared", "UpgradeMachine", "UpgradeOutcome"]
Log = Callable[[str], None]


class UpgradeMachine:
    """Runs the per-node upgrade over a transport; its record is RECORD's `upgrade` part (the rollout journal)."""

    def __init__(self, config: Upgrade, hooks: Hooks, transport: Transport, specs: dict[str, NodeSpec],
                 journal: Journal, record: RolloutJournal, log: Log = lambda _: None,
                 should_stop: Callable[[], bool] = lambda: False, poll: float = 1.0,
                 admission: Admission | None = None, operator: Desk | None = None) -> None:
        self.config, self.hooks, self.transport, self.specs = config, hooks, transport, specs
        # asked before each node starts (admission.py): the site's windows, capacity and operator, else a count
        self.count = max(1, scaled(config.max_unavailable, len(specs)))  # a percentage: of the nodes it knows
        self.admission: Admission = admission or OwnCount(self.count)
        self.operator: Desk = operator or NoDesk()  # skip / retry requests (operator.py; pause is an admission)
        self.journal, self.record, self.log, self.should_stop, self.poll = journal, record, log, should_stop, poll
        self.lock = threading.Lock()
        self.upgrade: UpgradeRecord = record.upgrading()
        self.upgrade.max_unavailable = config.max_unavailable
        self.taking = Taking(config, self._sh, lambda node: self.nodes[node], self._note, log, should_stop, poll)

    # ------------------------------------------------------------ the record

    @property
    def nodes(self) -> dict[str, NodeEntry]:
        """Node -> its state, since when, reason, boot id and jobs."""
        return self.upgrade.nodes

    @property
    def work(self) -> dict[str, NodeWork]:
        """Node -> what was applied and how to undo it."""
        return self.upgrade.work

    def _save(self) -> None:
        self.journal.save(self.record)

    def _set(self, node: str, state: S, **extra: Any) -> None:
        """Journal NODE's new state (an illegal transition refused), then pause here when a test asks (failpoint
        `upgrade.<state>`)."""
        with self.lock:
            self.nodes[node].move(node, state, **extra)
            self._save()
        self.log(f"upgrade: {node}: {state.value}" + (f" ({extra['reason']})" if extra.get("reason") else ""))
        failpoint(f"upgrade.{state.value}")

    def _note(self, node: str, **extra: Any) -> None:
        with self.lock:
            entry = self.nodes[node]
            for name, value in extra.items():
                setattr(entry, name, value)
            self._save()

    def in_flight(self) -> list[str]:
        """Nodes of the record not in a final state (what a restart must finish)."""
        return [n for n, e in self.nodes.items() if e.state not in FINAL]

    def _sh(self, host: str, command: str, timeout: float | None = None) -> tuple[bool, str]:
        result = self.transport.run(self.specs[host], command, timeout=timeout)
        return result.ok, (result.stdout if result.ok else (result.error or result.stderr or result.stdout))

    def _must(self, host: str, command: str, what: str) -> str:
        ok, out = self._sh(host, command)
        if not ok:
            raise NodeFailed(f"{what}: {out.strip()[-200:]}")
        return out

    def _wait(self, done: Callable[[], bool], seconds: float) -> bool:
        return wait_until(done, seconds, self.should_stop, self.poll)

    def _drainer(self, node: str) -> NodeDrain:
        """NODE's drain, jobs and resume (engine/drain.py: the one drain-wait-resume, the apply's too)."""
        return NodeDrain(node, self.hooks.steps(node), self._sh, self.poll, self.should_stop)

    def _boot_id(self, node: str) -> str | None:
        result = self.transport.run(self.specs[node], self.hooks.steps(node).part("boot_id"), timeout=30)
        if result.error is not None:  # a node rebooting: connect afresh next time, not the remembered failure
            self._forget(node)
        return result.stdout.strip() if result.ok and result.stdout.strip() else None

    def _forget(self, node: str) -> None:
        """Drop the transport's connection to NODE and its remembered failure (through wrappers)."""
        transport: Any = self.transport
        for _ in range(4):
            forget = getattr(transport, "forget", None)
            if callable(forget):
                forget(node)
                return
            transport = getattr(transport, "inner", None)
            if transport is None:
                return

    # ------------------------------------------------------------ running

    def run(self, nodes: list[str]) -> UpgradeOutcome:
        """Upgrade NODES (and finish the ones a killed process left in flight), at most max_unavailable at a
        time; past the failure budget, roll back every node the upgrade reached."""
        with self.lock:
            for node in nodes:
                self.nodes.setdefault(node, NodeEntry(state=S.REQUIRED, since=time.time(), reason=None,
                                                      boot_id=None, jobs=0))
            self._save()
        outcome = UpgradeOutcome()
        self._operator_acts([], set())  # what the operator asked while no machine ran (a retry: required again)
        nodes = [*nodes, *(n for n in retried(self.upgrade) if n not in nodes)]  # not among the caller's held
        started = [n for n in self.in_flight() if self.nodes[n].state != S.REQUIRED]
        waiting = [n for n in nodes if n not in started and self.nodes[n].state == S.REQUIRED]
        order = started + self._idle_first(waiting)
        if self._over_budget():
            order = [n for n in order if self.nodes[n].state == S.ROLLING_BACK]
        self._schedule(order, set(started))
        outcome.stopped = self.should_stop()
        for node in nodes + started:
            entry = self.nodes[node]
            if entry.state == S.DONE and node not in outcome.done:
                outcome.done.append(node)
            elif entry.state == S.FAILED:
                outcome.failed[node] = entry.reason or "failed"
            elif entry.state == S.REQUIRED and entry.reason or entry.state == S.SKIPPED:
                outcome.skipped[node] = entry.reason or "skipped"
        if self._over_budget() and not outcome.stopped:
            outcome.over_budget = True
            reached = [n for n, w in self.work.items() if w.undo is not None]
            back, errors = self.roll_back(reached)
            outcome.rolled_back, outcome.rollback_errors = back, errors
            for node in back:
                outcome.done = [n for n in outcome.done if n != node]
                outcome.failed.setdefault(node, self.nodes[node].reason or "rolled back")
            for node, why in errors.items():  # neither done nor put back: out of the gates, drained for a human
                outcome.done = [n for n in outcome.done if n != node]
                outcome.failed[node] = why
        return outcome

    def _schedule(self, order: list[str], started: set[str]) -> None:
        """Run ORDER's nodes, each once the admission lets it go (those in STARTED, in flight when a process
        stopped, go at once: a node in the middle finishes); what the rest wait for is journalled."""
        pending = list(order)
        running: dict[Future[None], str] = {}
        with ThreadPoolExecutor(max_workers=max(1, len(order))) as pool:
            while pending or running:
                if self._over_budget() or self.should_stop():
                    break
                pending = self._operator_acts(pending, set(running.values()))
                waiting: Verdict | None = None
                for node in list(pending):
                    verdict = GO if node in started else self.admission.admit(node, sorted(running.values()))
                    if verdict.go:
                        pending.remove(node)
                        running[pool.submit(self._one, node)] = node
                        continue
                    waiting = waiting if waiting is not None and waiting.kind == "hold" else verdict
                    if verdict.kind == "hold":
                        break
                self._waiting(waiting, pending)
                if running:
                    done, _ = wait(running, timeout=self.poll, return_when=FIRST_COMPLETED)
                    for future in done:
                        running.pop(future)
                elif pending:
                    self._wait(self.should_stop, self.poll)
            wait(running)
        self._waiting(None, [])

    def _operator_acts(self, pending: list[str], running: set[str]) -> list[str]:
        """The operator's skips (a node not started leaves PENDING) and retries (a failed node, uncounted, into
        PENDING again); others refused; each journalled (operator.py). The nodes left to start."""
        requests = self.operator.requests()
        for op, asked in (("skip", requests.skip), ("retry", requests.retry)):
            for node, request in sorted(asked.items()):
                state = self.nodes[node].state if node in self.nodes else None
                if op == "skip" and state == S.REQUIRED and node not in running:
                    pending, effect = [n for n in pending if n != node], "skipped: left on the old version"
                    self._set(node, S.SKIPPED, reason=f"skipped by the operator ({request.by()})")
                elif op == "retry" and state == S.FAILED:
                    with self.lock:
                        self.upgrade.failed = [n for n in self.upgrade.failed if n != node]
                        if node in self.work:
                            self.work[node].failed = False
                    self._set(node, S.REQUIRED, reason=None, jobs=0)
                    pending, effect = [*pending, node], "retried: through the machine again"
                else:
                    effect = f"refused: the node is {state.value if state else 'not in this upgrade'}"
                with self.lock:
                    self.upgrade.operator.append(OperatorAct(done=time.time(), effect=effect, **request.as_dict()))
                    self._save()
                self.log(f"upgrade: {node}: operator {op} ({request.by()}): {effect}")
                self.operator.acted(op, node, effect)
        return pending

    def _waiting(self, verdict: Verdict | None, pending: list[str]) -> None:
        """Journal what the nodes not started wait for (None: nothing), once per change."""
        now = None if verdict is None or not pending else Waiting(
            kind=verdict.kind, why=verdict.why, until=verdict.until, nodes=sorted(pending))
        if now == self.upgrade.waiting:
            return
        with self.lock:
            self.upgrade.waiting = now
            self._save()
        if now is not None:
            self.log(f"upgrade: {len(pending)} node(s) {'held' if now.kind == 'hold' else 'waiting'}: {now.why}")

    def _over_budget(self) -> bool:
        return len(self.upgrade.failed) > self.config.failure_budget

    def _idle_first(self, nodes: list[str]) -> list[str]:
        """Idle nodes first: busy ones have longer to finish their jobs before their turn."""
        def busy(node: str) -> bool:
            return self._drainer(node).jobs() != 0
        flags = {n: busy(n) for n in nodes}
        return [n for n in nodes if not flags[n]] + [n for n in nodes if flags[n]]

    def _one(self, node: str) -> None:
        """One node from wherever its record says it is to done or failed."""
        try:
            self._advance(node)
        except NodeFailed as exc:
            self._fail(node, str(exc))
        except Exception as exc:  # noqa: BLE001 - a broken step fails the node, never the rollout
            self._fail(node, f"{type(exc).__name__}: {exc}")

    def _advance(self, node: str) -> None:
        steps = self.hooks.steps(node)
        drain = self._drainer(node)
        while not self.should_stop():
            state = self.nodes[node].state
            if state in FINAL or state == S.ROLLING_BACK:
                return
            if state == S.REQUIRED:
                self._set(node, S.DRAINING)
            elif state == S.DRAINING:
                # an admin's drain: not ours to lift, so not ours to use (reservation.py: drain or reserve)
                if not drain.ours() and not self.taking.take(node, drain):
                    self._set(node, S.REQUIRED, reason="drained by someone else: not upgraded")
                    return
                self._set(node, S.WAITING_FOR_JOBS)
            elif state == S.WAITING_FOR_JOBS:
                ready = self.taking.ready(node, drain)  # a reservation: until it starts; requeue
                if ready == "taken":  # an admin drained it before its reservation started
                    self.taking.release(node, drain, must=False)
                    self._set(node, S.REQUIRED, reason="drained by someone else: not upgraded")
                    return
                if ready == "stopped" or not self._wait_jobs(node):  # stopped: the jobs may still run
                    return
                self._set(node, S.APPLYING)
            elif state == S.APPLYING:
                self._apply(node)
            elif state == S.REBOOTING:
                self._reboot(node, steps)
                if not self.should_stop():
                    self._keep_drained(node, steps)
                if self.should_stop():  # not known to be back and drained: a restart looks again
                    return
                self._set(node, S.VALIDATING)
            elif state == S.RELOADING:
                self._reload(node, steps)
                if self.should_stop():  # not known to be registered again: a restart reloads again
                    return
                self._set(node, S.VALIDATING)
            elif state == S.VALIDATING:
                self._validate(node, steps)
                return

    def _wait_jobs(self, node: str) -> bool:
        """Bounded by drain_timeout: the node's jobs end on their own (none is killed). False: a stop was asked
        before they ended."""
        def seen(count: int) -> None:
            if count != self.nodes[node].jobs:
                self._note(node, jobs=count)
        if not self._drainer(node).wait_jobs(parse_duration(self.config.drain_timeout), seen):
            if self.should_stop():
                return False
            raise NodeFailed(f"jobs still running after drain_timeout {self.config.drain_timeout}")
        return True

    def _apply(self, node: str) -> None:
        """Apply the node's held changes; the undo is journalled before they are applied."""
        prepared = self.hooks.prepare(node)
        work = self.work.get(node) or NodeWork()
        if prepared.needs is not None:
            with self.lock:
                if work.undo is None:  # a restart re-plans after the apply: keep the first before-image
                    work = NodeWork(needs=prepared.needs, undo=prepared.undo, summary=prepared.summary)
                    self.work[node] = work
                work.needs = "reboot" if "reboot" in (work.needs, prepared.needs) else prepared.needs
                self._save()
            failpoint("upgrade.before-apply")
            error = prepared.apply()
            if error:
                raise NodeFailed(f"apply: {error}")
        needs = work.needs
        if needs == "reboot":
            self._set(node, S.REBOOTING, boot_id=self._boot_id(node))
        elif needs == "driver-reload":
            self._set(node, S.RELOADING)
        else:  # nothing was left to apply and nothing recorded: the node already has the desired state
            self._set(node, S.VALIDATING)

    def _reboot(self, node: str, steps: DrainSteps) -> None:
        """Ask for the reboot unless it happened or is under way, then wait (bounded) for a new boot id and the
        node's daemon registered again."""
        old = self.nodes[node].boot_id
        if old is None:
            old = self._boot_id(node)
            if old is None:
                raise NodeFailed("cannot read the boot id before the reboot")
            self._note(node, boot_id=old)
        now = self._boot_id(node)
        if now == old and not self._sh(steps.run_on, steps.part("pending"))[0]:
            self._must(steps.run_on, steps.part("reboot"), "reboot")
        failpoint("upgrade.reboot-issued")

        def back() -> bool:
            current = self._boot_id(node)
            return current is not None and current != old and self._sh(steps.run_on, steps.part("registered"))[0]
        if not self._wait(back, parse_duration(self.config.reboot_timeout)) and not self.should_stop():
            raise NodeFailed(f"not back within reboot_timeout {self.config.reboot_timeout} "
                             "(new boot id and registered)")

    def _reload(self, node: str, steps: DrainSteps) -> None:
        """Reload the node's driver stack, then wait (bounded by reboot_timeout) for its daemon registered again: a
        reload that stops and starts slurmd leaves the node NOT_RESPONDING until slurmd registers, and a gate run
        before that fails a healthy node (seen on the testbed, 22.05)."""
        for command in self.hooks.reload(node).commands:
            self._must(node, command, "driver reload")
        if not self._wait(lambda: self._sh(steps.run_on, steps.part("registered"))[0],
                          parse_duration(self.config.reboot_timeout)) and not self.should_stop():
            raise NodeFailed(f"not registered again within reboot_timeout {self.config.reboot_timeout} "
                             "after the driver reload")

    def _keep_drained(self, node: str, steps: DrainSteps) -> None:
        """Slurm 22.05 may bring a node back from a slow reboot IDLE, its drain gone (seen on the testbed after
        83 s): drain it again and let what landed on it end, so the gates see a drained node and the resume stays
        ours."""
        if not hold(self._drainer(node), "drain again after the reboot"):  # ours still, or an admin's
            return
        self.log(f"upgrade: {node}: back from the reboot without its drain: drained again")
        self._wait_jobs(node)

    def _validate(self, node: str, steps: DrainSteps) -> None:
        """What a boot lost put back (mounts), the gates while drained; resume (only our own drain: once); the
        gates that need a resumed node."""
        why = self.hooks.converge(node) or self.hooks.validate(node)
        if why:
            raise NodeFailed(why)
        drain = self._drainer(node)
        self.taking.release(node, drain, must=True)  # before the resume: no job could start inside it
        if drain.ours():
            why = drain.resume()
            if why is not None:
                raise NodeFailed(f"resume: {why}")
            self.log(f"upgrade: {node}: resumed")
        why = self.hooks.after_resume(node)
        if why:
            raise NodeFailed(why)
        self._set(node, S.DONE, reason=None)

    def _fail(self, node: str, why: str) -> None:
        """Keep NODE drained with WHY; count it against the failure budget."""
        if self.hooks.fail is not None:
            steps = self.hooks.steps(node)
            self._sh(steps.run_on, self.hooks.fail(node, why))
        self.taking.release(node, self._drainer(node), must=False)  # the drain keeps it out now
        with self.lock:
            if node not in self.upgrade.failed:
                self.upgrade.failed.append(node)
            if node in self.work:
                self.work[node].failed = True
        self._set(node, S.FAILED, reason=why)

    # ------------------------------------------------------------ rolling back

    def roll_back(self, nodes: list[str]) -> tuple[list[str], dict[str, str]]:
        """Put NODES (those the upgrade applied something on) back: undo, reboot or reload, wait; resume the ones
        that had passed, keep the failed ones drained. Returns the nodes rolled back and, for every node of NODES
        whose rollback failed (now or in an earlier pass: never tried again), why."""
        todo = [n for n in nodes if n in self.work and self._state(n) not in (S.ROLLED_BACK, S.ROLLBACK_FAILED)]
        if todo:
            with ThreadPoolExecutor(max_workers=self.count) as pool:
                list(pool.map(self._back, todo))
        errors = {n: self.nodes[n].reason or "rollback failed" for n in nodes  # rolling-back: stopped
                  if n in self.work and self._state(n) in (S.ROLLBACK_FAILED, S.ROLLING_BACK)}
        return [n for n in todo if self.nodes[n].state == S.ROLLED_BACK], errors

    def _state(self, node: str) -> S | None:
        entry = self.nodes.get(node)
        return entry.state if entry is not None else None

    def _back(self, node: str) -> str | None:
        steps = self.hooks.steps(node)
        work = self.work[node]
        try:
            if self.nodes[node].state != S.ROLLING_BACK:
                self._set(node, S.ROLLING_BACK, boot_id=None)
            if self.nodes[node].boot_id is None:
                # a node that passed was resumed and may run jobs again: out of scheduling and idle first
                hold(self._drainer(node), "drain")
                self._wait_jobs(node)
                if self.should_stop():
                    raise NodeFailed("stopped while waiting for its jobs (the rollback goes on at the next start)")
                for command in work.undo or []:
                    self._must(node, command, "undo")
                if work.needs == "reboot":
                    self._note(node, boot_id=self._boot_id(node))
            if work.needs == "reboot":
                self._reboot(node, steps)
            elif work.needs == "driver-reload":
                self._reload(node, steps)
        except Exception as exc:  # noqa: BLE001 - a broken step fails this node's rollback, never the others'
            why = f"rollback failed: {exc if isinstance(exc, NodeFailed) else f'{type(exc).__name__}: {exc}'}"
            if self.hooks.fail is not None:
                self._sh(steps.run_on, self.hooks.fail(node, why))
            if self.should_stop():  # not failed, interrupted: still rolling-back, finished at the next start
                self._note(node, reason=why)
            else:
                self._set(node, S.ROLLBACK_FAILED, reason=why)
            return why
        if work.failed:
            reason = f"{self.nodes[node].reason or 'failed'}; rolled back"
            if self.hooks.fail is not None:
                self._sh(steps.run_on, self.hooks.fail(node, reason))
            self._set(node, S.ROLLED_BACK, reason=reason)
        else:
            drain = self._drainer(node)
            if drain.ours():
                drain.resume()
            self._set(node, S.ROLLED_BACK, reason="rolled back with the rollout")
        return None
