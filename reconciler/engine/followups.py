"""Consequences as data: what must follow a change (reload, restart, a command), declared by drivers.

A driver attaches `FollowUp`s to its changes (a managed file that notifies a service's restart) or returns them
for the whole plan (a configuration change that needs a command on one node). The engine merges
them (one restart per node and service, whatever asked for it; a restart makes a reload of the same service
unnecessary), orders them (after the phase of the last change that asked, then by `order`), shows them in
plan, PR comment and crash journal, and runs them. It knows nothing of what a service is: draining a node
before a rolling restart is a `DrainSteps` (engine/drain.py) of shell commands that the driver that asked for it
wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from reconciler.engine.drain import DrainSteps
from reconciler.engine.nodesets import SHORT_CAP, cap_nodeset, fold_mentions, fold_names, node_key, nodes_phrase

FollowUpKind = Literal["command", "reload", "restart", "start"]

# Within one phase, lower orders run first: by default a command before a service. Drivers place their own steps
# between and around these (drivers/step_order.py: the Slurm daemons' start-up order).
ORDER_COMMAND = 10
ORDER_SERVICE = 50


class FollowUp(BaseModel):
    """One step that must follow a change: on one node, after the phase of the changes that asked for it."""

    node: str
    kind: FollowUpKind
    target: str = Field(description="The service (reload/restart/start) or the shell command (command)")
    phase: int = Field(description="Runs after this phase's changes are applied")
    order: int = ORDER_SERVICE
    run_on: str | None = Field(default=None, description="Node whose shell runs it (default: node)")
    label: str | None = Field(default=None, description="What the report calls it (default: the target)")
    rolling: bool = Field(default=False, description="A batch of nodes at a time (--max-unavailable)")
    drain: DrainSteps | None = Field(default=None, description="Drain first when jobs run (rolling only)")
    protect: dict[str, DrainSteps] = Field(default_factory=dict, description="Nodes whose running jobs this step "
                                           "would end: drained and waited empty (bounded) before it, resumed after")
    ready: str | None = Field(default=None, description="Exits 0 once the service answers again")
    ready_on: str | None = Field(default=None, description="Node whose shell runs `ready` (default: run_on/node)")
    gone: str | None = Field(default=None, description="Exits 0 when the service stopped for good: stop waiting "
                             "for `ready` (run on ready_on)")
    service: str | None = Field(default=None, description="The service a command acts on: where it does not run "
                                "when the step comes, the step starts it instead (a reconfigure of a dead daemon)")
    jobs: list[str] = Field(default_factory=list, description="Jobs running on the node when planned")
    reasons: list[str] = Field(default_factory=list)
    supersedes: list[str] = Field(default_factory=list, description="Keys of follow-ups this one makes needless")
    warnings: list[str] = Field(default_factory=list, exclude=True, description="What the plan must warn of this "
                                "step (running jobs it ends); shown by the plan, not kept in journals")

    @property
    def key(self) -> str:
        """Identity for merging: the same step on the same node is done once."""
        return f"{self.node}|{self.kind}|{self.target}"

    @property
    def host(self) -> str:
        """The node whose shell runs the step."""
        return self.run_on or self.node

    def title(self) -> str:
        """What the step is, without its node: `restart slurmd`, `run sysctl --system`."""
        what = self.label or self.target
        return f"run `{what}`" if self.kind == "command" else f"{self.kind} {what}"


def followup_key(node: str, kind: FollowUpKind, target: str) -> str:
    """The key of a follow-up, for `supersedes`."""
    return f"{node}|{kind}|{target}"


def command(node: str, cmd: str, phase: int, reason: str, *, label: str | None = None,
            order: int = ORDER_COMMAND, run_on: str | None = None) -> FollowUp:
    """A shell command to run once on a node after the phase."""
    return FollowUp(node=node, kind="command", target=cmd, phase=phase, order=order, reasons=[reason],
                    label=label, run_on=run_on)


def service(node: str, kind: Literal["reload", "restart", "start"], name: str, phase: int, reason: str, *,
            order: int = ORDER_SERVICE, rolling: bool = False, drain: DrainSteps | None = None,
            ready: str | None = None, ready_on: str | None = None, jobs: Sequence[str] = ()) -> FollowUp:
    """A service step on a node after the phase."""
    return FollowUp(node=node, kind=kind, target=name, phase=phase, order=order, rolling=rolling, drain=drain,
                    ready=ready, ready_on=ready_on, jobs=list(jobs), reasons=[reason])


def merge(followups: Iterable[FollowUp]) -> list[FollowUp]:
    """One follow-up per key, reasons and jobs joined, after the latest phase that asked; superseded ones
    (a reload where the same service restarts, what a step names in `supersedes`) dropped; in run order."""
    merged: dict[str, FollowUp] = {}
    for item in followups:
        have = merged.get(item.key)
        if have is None:
            merged[item.key] = item.model_copy(deep=True)
            continue
        have.phase = max(have.phase, item.phase)
        have.order = min(have.order, item.order)
        have.rolling |= item.rolling
        have.drain = have.drain or item.drain
        have.protect = {**item.protect, **have.protect}
        have.ready = have.ready or item.ready
        have.ready_on = have.ready_on or item.ready_on
        have.gone = have.gone or item.gone
        have.service = have.service or item.service
        have.reasons += [r for r in item.reasons if r not in have.reasons]
        have.jobs += [j for j in item.jobs if j not in have.jobs]
        have.supersedes += [s for s in item.supersedes if s not in have.supersedes]
    restarted = {(f.node, f.target): f for f in merged.values() if f.kind in ("restart", "start")}
    gone = {s for f in merged.values() for s in f.supersedes}
    kept = []
    for key, item in merged.items():
        heir = restarted.get((item.node, item.target)) if item.kind == "reload" else None
        if heir is not None:  # the restart does what the reload would have: it inherits the reasons
            heir.reasons += [r for r in item.reasons if r not in heir.reasons]
        elif key not in gone:
            kept.append(item)
    return sorted(kept, key=lambda f: (f.phase, f.order, f.kind, f.target, node_key(f.node)))


def waves(followups: Sequence[FollowUp], phase: int) -> list[list[FollowUp]]:
    """The follow-ups of one phase in waves: every step of one order and kind together, lower orders first."""
    out: dict[tuple[int, str, str], list[FollowUp]] = {}
    for item in followups:
        if item.phase == phase:
            out.setdefault((item.order, item.kind, item.target), []).append(item)
    return [out[k] for k in sorted(out)]


def _job_key(job: str) -> tuple[int, str]:
    head = job.split("_")[0]
    return (int(head) if head.isdigit() else 0, job)


def describe(followups: Sequence[FollowUp]) -> list[str]:
    """Human sentences, one per step, node sets folded (`restarts slurmd on gpu[001-1024]`) and capped."""
    groups: dict[tuple[int, int, str, str, str], list[FollowUp]] = {}
    for item in followups:
        groups.setdefault((item.phase, item.order, item.kind, item.target, item.label or ""), []).append(item)
    out = []
    for (_, _, kind, target, label), items in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        nodes = sorted({f.node for f in items}, key=node_key)
        what = label or target
        verb = {"command": f"runs `{what}`", "reload": f"reloads {what}", "restart": f"restarts {what}",
                "start": f"starts {what}"}[kind]
        text = f"{verb} on {nodes_phrase(nodes)}"
        busy = {f.node: f.jobs for f in items if f.jobs and f.drain is not None}
        staying = sorted({f.node for f in items if f.jobs and f.drain is None}, key=node_key)
        if busy:
            drained = sorted(busy, key=node_key)
            jobs = sorted({j for js in busy.values() for j in js}, key=_job_key)
            shown = ", ".join(jobs[:10]) + (", ..." if len(jobs) > 10 else "")
            have = "has" if len(drained) == 1 else "have"
            text += (f"; {len(drained):,} {have} running jobs and will be drained first: "
                     f"{cap_nodeset(fold_names(drained), SHORT_CAP)} (jobs {shown})")
        if staying:
            text += (f"; in place on {cap_nodeset(fold_names(staying), SHORT_CAP)}, not drained: "
                     "their running jobs keep running")
        kept = sorted({node for f in items for node in f.protect}, key=node_key)
        if kept:
            text += (f"; first drains {cap_nodeset(fold_names(kept), SHORT_CAP)} and waits (at most --drain-timeout) "
                     "until no job runs there, since the step would end those jobs; resumes them after it")
        out.append(text)
    return out


def folded_reasons(followups: Sequence[FollowUp]) -> list[str]:
    """Every reason once, those that differ only by a node's name folded (`... on gpu[01-16]`)."""
    reasons: list[str] = []
    for item in followups:
        reasons += [r for r in item.reasons if r not in reasons]
    return fold_mentions(reasons, sorted({f.node for f in followups}, key=node_key))


def carried(pending: Sequence[FollowUp], reachable: set[str]) -> list[FollowUp]:
    """Steps an interrupted apply left undone (its files were written, its restarts were not) on nodes we can
    reach now, each marked so in its reasons; merged with the new plan's own by the caller."""
    out = []
    for item in pending:
        if item.host in reachable and item.node in reachable:
            copy = item.model_copy(deep=True)
            copy.jobs = []
            copy.reasons = [*copy.reasons, "left undone by an interrupted apply"]
            out.append(copy)
    return out
