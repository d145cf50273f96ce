"""Follow-ups owed: steps an apply wrote the files for but did not finish, kept in a marker file on a node.

Why on the node and not in a local store of the CLI: the obligation belongs to the cluster, not to whoever ran
`apply`. A `scontrol reconfigure` that failed from one login node must be shown by `plan` from any other, by a
colleague's checkout and by the daemon; a store under the CLI user's home would be seen by that user alone, and
the daemon would plan clean while slurmctld runs the old file. The fact gathering already reads every node in one
round trip, so reading the marker costs nothing; writing it costs one round trip before an apply's steps and
one after, on the nodes that keep steps only (`reconciler/engine/owed_ledger.py`).

Which node keeps a step: its own node when everything it runs runs there (a `sysctl --system`, a restart without
drain); otherwise the controller (a slurmd restart drains and checks on the controller). A marker is trusted to
name only what runs on the node that holds it, so a compromised compute node cannot have the reconciler run a
shell command on the controller; the controller's own marker may name any node (whoever owns the controller owns
the cluster already).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from pydantic import BaseModel, Field, ValidationError

from reconciler.engine.context import Context
from reconciler.engine.followups import FollowUp
from reconciler.engine.plan import Change
from reconciler.model.values import visible

OWED_PATH = "/var/lib/reconciler/followups-owed.json"
DRIVER = "followups"


class OwedStep(BaseModel):
    """One step owed: the follow-up as planned, when and by whom the apply that left it undone ran, and why."""

    step: FollowUp
    since: str = Field(description="UTC time the apply recorded it (ISO 8601)")
    by: str = Field(description="user@host of the apply (the CLI) or the daemon's")
    error: str | None = Field(default=None, description="What stopped it, the last time an apply tried")


class OwedFile(BaseModel):
    """The marker file's content."""

    owed: list[OwedStep] = Field(default_factory=list)


def touched(step: FollowUp) -> set[str]:
    """Every node whose shell a step uses: its node and host, the drains' and the readiness check's."""
    nodes = {step.node, step.host}
    if step.drain is not None:
        nodes.add(step.drain.run_on)
    nodes.update(drain.run_on for drain in step.protect.values())
    if step.ready:
        nodes.add(step.ready_on or step.host)
    return nodes


def keeper(ctx: Context, step: FollowUp) -> str:
    """The node whose marker keeps a step: its own when it runs only there, else the controller."""
    return step.node if touched(step) == {step.node} else ctx.controller


def read_owed(ctx: Context) -> tuple[dict[str, list[OwedStep]], list[Change]]:
    """The owed steps in every gathered node's marker, by keeping node; an error change for each marker that
    cannot be read or names another node's shell (its steps are not run, the file is left for a human)."""
    owed: dict[str, list[OwedStep]] = {}
    problems: list[Change] = []
    for node, facts in ctx.facts.nodes.items():
        fact = facts.files.get(OWED_PATH) if facts.reachable else None
        if fact is None or not fact.exists:
            continue
        where = f"{node}:{OWED_PATH}"
        why = None
        try:
            marker = OwedFile.model_validate(json.loads(fact.content or ""))
        except json.JSONDecodeError as exc:
            why = f"{where}:{exc.lineno}: not JSON ({exc.msg})"
        except ValidationError as exc:
            first = exc.errors()[0]
            path = ".".join(str(p) for p in first["loc"])
            why = f"{where}: {path}: {first['msg']}"
        else:
            foreign = [(i, s.step) for i, s in enumerate(marker.owed)
                       if node != ctx.controller and touched(s.step) != {node}]
            if foreign:
                index, step = foreign[0]
                names = ", ".join(sorted(touched(step) - {node}))
                why = f"{where}: owed.{index}.step: names {names}; a node's marker may only name itself"
            else:
                owed[node] = [_shown(s) for s in marker.owed]
        if why is not None:
            problems.append(Change(node=node, driver=DRIVER, resource=OWED_PATH, action="error",
                                   summary=f"{visible(why)[:500]}: the steps it holds are not run; remove the "
                                           "file once they are done by hand"))
    return owed, problems


def _shown(item: OwedStep) -> OwedStep:
    """Text read from a node, made safe to print (no escape sequence reaches a terminal)."""
    step = item.step.model_copy(deep=True)
    step.reasons = [visible(r) for r in step.reasons]
    step.label = visible(step.label) if step.label else None
    return OwedStep(step=step, since=visible(item.since), by=visible(item.by),
                    error=visible(item.error) if item.error else None)


def eligible(ctx: Context, step: FollowUp) -> bool:
    """A step this run may carry out: its node and host reached, and within --limit."""
    reachable = {name for name, facts in ctx.facts.nodes.items() if facts.reachable}
    if ctx.limit is not None:
        reachable &= set(ctx.limit)
    return step.node in reachable and step.host in reachable


def owed_reason(item: OwedStep) -> str:
    """Why plan shows a step no change asked for."""
    what = f": {item.error}" if item.error else ""
    return f"owed since {item.since}: the apply by {item.by} did not finish it{what}"


def owed_followups(ctx: Context, owed: dict[str, list[OwedStep]]) -> list[FollowUp]:
    """The owed steps this run can carry out, each with the reason it is owed (jobs are looked at again)."""
    out = []
    for items in owed.values():
        for item in items:
            if eligible(ctx, item.step):
                step = item.step.model_copy(deep=True)
                step.jobs = []
                step.reasons = [*step.reasons, owed_reason(item)]
                out.append(step)
    return out


def covered(entry: FollowUp, steps: Iterable[FollowUp]) -> bool:
    """The plan does what ENTRY asks: the same step, one that supersedes it, or a restart of its reload."""
    for step in steps:
        if step.key == entry.key or entry.key in step.supersedes:
            return True
        if (entry.kind == "reload" and step.kind in ("restart", "start") and step.node == entry.node
                and step.target == entry.target):
            return True
    return False
