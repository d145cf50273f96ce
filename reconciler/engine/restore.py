"""Put the resources an apply changed back to their before-images (reconciler/engine/before_image.py).

The restore is a plan like any other: one change per resource whose before-image can be restored and that is
not already as before, in the mirror order of the apply (its last phase first), with the follow-ups the
apply's changes needed (the same keys going back need the same reconfigure and restarts), applied by the
engine. The report says, per node, what was put back, what was already as before, and what was not restored
and why: nothing is called restored that was not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reconciler.engine.apply import ApplyOptions, Log, apply_plan
from reconciler.engine.before_image import BeforeImage, RestoreItem
from reconciler.engine.context import Context
from reconciler.engine.followups import FollowUp, merge
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.plan import Change, Plan
from reconciler.transport.base import Transport


@dataclass
class RestoreReport:
    """What a restore did, node by node."""

    restored: dict[str, list[str]] = field(default_factory=dict)
    unchanged: dict[str, list[str]] = field(default_factory=dict)  # the change never landed: nothing to undo
    not_restored: dict[str, list[str]] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every resource is back as it was."""
        return not self.not_restored

    def note(self, where: dict[str, list[str]], node: str, text: str) -> None:
        """Record TEXT for NODE in one of the lists."""
        where.setdefault(node, []).append(text)

    def as_dict(self) -> dict[str, object]:
        """For the rollout record."""
        return {"restored": self.restored, "unchanged": self.unchanged, "not_restored": self.not_restored,
                "steps": self.steps}


def restore(ctx: Context, image: BeforeImage, transport: Transport, options: ApplyOptions,
            log: Log = lambda _: None) -> RestoreReport:
    """Restore IMAGE on the nodes of CTX (facts gathered just now: who is reachable, which services run)."""
    report = RestoreReport()
    live: list[RestoreItem] = []
    for item in image.items:
        host = item.run_on or item.node
        facts = ctx.facts.nodes.get(host)
        if item.restore.missing:
            report.note(report.not_restored, item.node, f"{item.resource}: {item.restore.missing}")
        elif facts is None or not facts.reachable or host not in ctx.specs:
            why = facts.error if facts is not None and facts.error else "not reached"
            report.note(report.not_restored, item.node, f"{item.resource}: {host} unreachable ({why})")
        else:
            live.append(item)
    already = _already_as_before(ctx, live, transport)
    changes: list[Change] = []
    for index, item in enumerate(live):
        if index in already:
            report.note(report.unchanged, item.node, item.resource)
            continue
        changes.append(Change(node=item.node, driver=item.driver, resource=item.resource, action="update",
                              phase=-item.phase, run_on=item.run_on, ops=item.restore.ops,
                              summary=f"restore: {item.restore.summary}"))
    if not changes:
        return report
    plan = Plan(source=ctx.source, commit=ctx.loaded.commit, changes=changes,
                followups=undo_followups(image.followups, {n for n, f in ctx.facts.nodes.items() if f.reachable}))
    result = apply_plan(ctx, plan, transport, options, log)
    report.steps = result.steps
    applied = {id(c) for c in result.applied}
    for change in changes:
        if id(change) in applied:
            report.note(report.restored, change.node, change.summary.removeprefix("restore: "))
            continue
        said = [m for m in result.failures.get(change.node, []) if _about(change, m)]
        why = "; ".join(said) or "not confirmed: another restore on the node failed"
        report.note(report.not_restored, change.node, f"{change.resource}: {why}")
    for node, messages in result.failures.items():  # a failed follow-up: the files are back, Slurm may not be
        for message in messages:
            if not any(_about(c, message) for c in changes if c.node == node):
                report.note(report.not_restored, node, f"follow-up: {message}")
    return report


def undo_followups(followups: list[FollowUp], reachable: set[str]) -> list[FollowUp]:
    """The apply's follow-ups for the restore: after the mirror phase, a start made a restart (the service
    runs now; a restart of a stopped one starts it), on nodes reachable now."""
    out = []
    for step in followups:
        if step.node not in reachable or step.host not in reachable:
            continue
        copy = step.model_copy(deep=True)
        copy.phase, copy.jobs = -step.phase, []
        if copy.kind == "start":
            copy.kind = "restart"
        copy.reasons = [f"restoring: {r}" for r in copy.reasons]
        out.append(copy)
    return merge(out)


def _already_as_before(ctx: Context, items: list[RestoreItem], transport: Transport) -> set[int]:
    """Indexes of ITEMS whose check says the resource is as before (one command per node)."""
    by_host: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if item.restore.check:
            by_host.setdefault(item.run_on or item.node, []).append(index)
    if not by_host:
        return set()

    def script(spec: object) -> str:
        name = getattr(spec, "name", "")
        return "; ".join(f"if ( {items[i].restore.check} ) >/dev/null 2>&1; then echo {i}; fi"
                         for i in by_host[name]) + "; true"

    results = transport.run_many([ctx.specs[h] for h in by_host], script)
    found: set[int] = set()
    for host, result in results.items():
        if result.ok:  # a node that did not answer: restore it all (each write refuses a file changed since)
            found |= {int(w) for w in result.stdout.split() if w.isdigit() and int(w) in by_host.get(host, [])}
    return found


def _about(change: Change, message: str) -> bool:
    """True when an apply failure MESSAGE names one of CHANGE's operations."""
    for op in change.ops:
        label = op.path if isinstance(op, WriteFile) else (op.description or op.command)
        if isinstance(op, (WriteFile, RunCommand)) and message.startswith(f"{label}:"):
            return True
    return False
