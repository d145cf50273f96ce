"""What failing and passing checks do to Slurm: drain failing nodes, resume nodes a check drained itself.

Reasons name the check that owns the drain: `reconciler: nccl <check>: all_reduce busbw 120.3 < 330 GB/s` and
`reconciler: check <check>: mount /shared: not mounted` (both start with one of node_state.CHECK_PREFIXES,
so the node-state driver leaves them alone). A passing check resumes a node only when the node's drain
reason is its own; a drain by a human, NHC, or any other reason is never touched. When another check
still fails on the node, the drain is handed over to that check (its reason) instead of a resume.
A check that fails on more than `max_drains` nodes in one run drains none of them: that looks like a
broken check or a cluster-wide problem, not bad nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from reconciler.checks.results import CheckKind, CheckResult
from reconciler.checks.slurm_view import SlurmView
from reconciler.desired.inventory import NodeSpec
from reconciler.drivers.node_state import GPU_REASON_PREFIX, REASON_PREFIX, drain_command, resume_command
from reconciler.transport.base import Transport

REASON_MAX = 128  # Slurm keeps longer reasons, but sinfo -R and dashboards show the start only
ActionKind = Literal["drain", "resume", "keep", "refused"]
Key = tuple[str, str]  # (kind, check)


@dataclass(frozen=True)
class Policy:
    """How a check may act: drain on failure, and at most this many drains in one run."""

    drain_on_fail: bool = True
    max_drains: int = 1 << 30
    gpu: bool = False  # the check probes GPUs: it owns `reconciler: gpu ...` drains


@dataclass
class Action:
    """A decision about one node: drain, resume, keep as is (with a note), or a refused drain."""

    node: str
    kind: ActionKind
    check: str
    reason: str | None = None
    note: str = ""
    done: bool = False
    error: str | None = None

    @property
    def command(self) -> str | None:
        """The scontrol command that carries the action out, if any."""
        if self.kind == "drain" and self.reason:
            return drain_command(self.node, self.reason)
        if self.kind == "resume":
            return resume_command(self.node)
        return None

    def line(self) -> str:
        """One line for humans."""
        what = {"drain": f"drain {self.node} ({self.reason})", "resume": f"resume {self.node}",
                "keep": f"keep {self.node}", "refused": f"not draining {self.node}"}[self.kind]
        outcome = f": FAILED {self.error}" if self.error else ""
        return f"{what}{' - ' + self.note if self.note else ''}{outcome}"


def reason_prefix(kind: CheckKind | str, check: str) -> str:
    """The start of every drain reason written for a check: ownership is decided on it."""
    return f"{REASON_PREFIX} nccl {check}:" if kind == "nccl" else f"{REASON_PREFIX} check {check}:"


def owns(kind: CheckKind | str, check: str, reason: str | None, gpu: bool = False) -> bool:
    """True when a drain reason was written by this check (GPU: a check probing GPUs owns GPU-fault drains)."""
    text = str(reason or "")
    return bool(text) and (text.startswith(reason_prefix(kind, check))
                           or (gpu and kind == "node" and text.startswith(GPU_REASON_PREFIX)))


def shorten(text: str, limit: int) -> str:
    """Cut text to at most limit characters, marking the cut with '...'."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def drain_reason(result: CheckResult) -> str:
    """The Slurm reason for a failing result, short and without '=' (which scontrol output treats as a key)."""
    message = result.message
    if result.kind == "nccl" and message.startswith("nccl "):
        message = message[len("nccl "):]
    if result.kind == "node" and message.startswith("gpu "):  # the first GPU fault: `reconciler: gpu 3 xid 79 (...)`
        text = f"{REASON_PREFIX} {message.split('; ', 1)[0]}".replace("=", ":").replace("\n", " ")
        return shorten(text, REASON_MAX)
    text = f"{reason_prefix(result.kind, result.check)} {message}".replace("=", ":").replace("\n", " ")
    return shorten(text, REASON_MAX)


def plan_actions(results: list[CheckResult], view: SlurmView, policies: dict[Key, Policy],
                 others: Iterable[CheckResult] = ()) -> list[Action]:
    """Decide drains and resumes for this run's RESULTS.

    VIEW is Slurm's current view; OTHERS are the latest known results of any check (e.g. `store.latest`),
    used to keep a node drained while another check still fails on it.
    """
    current: dict[tuple[str, str, str], CheckResult] = {(o.kind, o.check, o.node): o for o in others}
    current.update({(r.kind, r.check, r.node): r for r in results})
    failing: dict[str, list[CheckResult]] = {}
    for result in current.values():
        if result.failed and policies.get((result.kind, result.check), Policy(False)).drain_on_fail:
            failing.setdefault(result.node, []).append(result)
    drains_wanted: dict[Key, int] = {}
    for result in results:
        if result.failed and result.node in view.nodes:
            key = (result.kind, result.check)
            drains_wanted[key] = drains_wanted.get(key, 0) + 1
    actions = []
    for result in results:
        action = _decide(result, view, policies.get((result.kind, result.check), Policy()), failing, drains_wanted)
        if action is not None:
            actions.append(action)
    return actions


def _decide(result: CheckResult, view: SlurmView, policy: Policy, failing: dict[str, list[CheckResult]],
            drains_wanted: dict[Key, int]) -> Action | None:
    """The action for one result, or None when there is nothing to do or say."""
    fact = view.nodes.get(result.node)
    if fact is None or result.skipped or result.error:
        return None
    mine = owns(result.kind, result.check, fact.reason, policy.gpu)
    if result.failed:
        if not policy.drain_on_fail:
            return None
        if fact.drained:
            note = "already drained by this check" if mine else f"already drained: {fact.reason or 'no reason'}"
            return Action(result.node, "keep", result.check, fact.reason, note)
        wanted = drains_wanted.get((result.kind, result.check), 0)
        if wanted > policy.max_drains:
            note = f"{wanted} nodes failed {result.check}, more than {policy.max_drains}: check the check"
            return Action(result.node, "refused", result.check, drain_reason(result), note)
        return Action(result.node, "drain", result.check, drain_reason(result))
    if not (fact.drained and mine):
        return None
    if fact.next_state:  # an ASAP reboot's drain under our old reason (24.11): a resume would cancel the reboot
        return Action(result.node, "keep", result.check, fact.reason,
                      f"drained for a pending reboot (NextState={fact.next_state}): Slurm lifts it")
    still = [o for o in failing.get(result.node, []) if (o.kind, o.check) != (result.kind, result.check)]
    if still:
        return Action(result.node, "drain", result.check, drain_reason(still[0]),
                      f"{result.check} passed, but {still[0].check} still fails")
    return Action(result.node, "resume", result.check, note=f"{result.check} passed")


def apply_actions(transport: Transport, controller: NodeSpec, actions: list[Action], view: SlurmView | None = None,
                  log: Callable[[str], None] = lambda _: None) -> list[Action]:
    """Run the scontrol commands of ACTIONS on the controller; mark each done or failed; update VIEW."""
    for action in actions:
        command = action.command
        if command is None:
            log(action.line())
            continue
        outcome = transport.run(controller, command)
        if outcome.ok:
            action.done = True
            if view is not None:
                view.set_drain(action.node, action.reason if action.kind == "drain" else None)
        else:
            action.error = outcome.describe()
        log(action.line())
    return actions
