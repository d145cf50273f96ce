"""Before-images: what each change of an applied plan replaced, taken from the facts that plan was made from.

A rollout with no previous desired state to go back to (`reconciler apply` without --previous, a daemon's
first commit) restores these instead (reconciler/engine/restore.py). A changed file's before-image is its
content, mode and owner as the facts read them, or its absence; a change made by commands carries its own
undo when its driver knows one (`Change.restore`). Anything else is kept as a `missing` entry saying why, so
the report can say what was not restored.
"""

from __future__ import annotations

import hashlib
import shlex

from pydantic import BaseModel, Field

from reconciler.engine.context import Context
from reconciler.engine.followups import FollowUp
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.plan import Change, Plan
from reconciler.engine.undo import Restore
from reconciler.facts.models import NodeFacts


class RestoreItem(BaseModel):
    """One changed resource of one node and how to put it back."""

    node: str
    driver: str
    resource: str
    phase: int
    run_on: str | None = None
    restore: Restore


class BeforeImage(BaseModel):
    """The before-images of the changes an apply made, and the follow-ups those changes needed (putting the
    same keys back needs the same reconfigure and restarts)."""

    items: list[RestoreItem] = Field(default_factory=list)
    followups: list[FollowUp] = Field(default_factory=list)

    def add(self, other: BeforeImage) -> None:
        """Take in another wave's before-images; a resource already held keeps its first one (a wave applied
        again after a restart reads facts the first try had already changed)."""
        held = {(i.node, i.resource) for i in self.items}
        self.items += [i for i in other.items if (i.node, i.resource) not in held]
        self.followups += other.followups


def capture(ctx: Context, plan: Plan) -> BeforeImage:
    """The before-image of every changing resource of PLAN, from the facts in CTX it was planned from."""
    items = [RestoreItem(node=c.node, driver=c.driver, resource=c.resource, phase=c.phase, run_on=c.run_on,
                         restore=c.restore or file_restore(ctx.facts.nodes.get(c.run_on or c.node), c))
             for c in plan.changing()]
    return BeforeImage(items=items, followups=[f.model_copy(deep=True) for f in plan.followups])


def file_restore(facts: NodeFacts | None, change: Change) -> Restore:
    """How to put back the files CHANGE writes, from FACTS (of the node that runs its ops)."""
    writes = [op for op in change.ops if isinstance(op, WriteFile)]
    commands = [op.description or op.command for op in change.ops if isinstance(op, RunCommand)]
    if commands:
        return Restore.none(f"it ran commands with no known undo: {'; '.join(commands)}")
    if not writes:
        return Restore.none("it has no operations to undo")
    parts = [_one_file(facts, op) for op in writes]
    missing = [p.missing for p in parts if p.missing]
    if missing:
        return Restore.none("; ".join(missing))
    return Restore(summary="; ".join(p.summary for p in parts), ops=[op for p in parts for op in p.ops],
                   check=" && ".join(f"( {p.check} )" for p in parts))


def written_sha256(op: WriteFile) -> str:
    """The sha256 of the bytes OP writes."""
    import base64

    data = base64.b64decode(op.content) if op.encoding == "base64" else op.content.encode()
    return hashlib.sha256(data).hexdigest()


def _one_file(facts: NodeFacts | None, op: WriteFile) -> Restore:
    path = shlex.quote(op.path)
    fact = facts.files.get(op.path) if facts is not None else None
    if op.secret:
        return Restore.none(f"{op.path} is a secret: its old content is never read off the node")
    if fact is None:
        return Restore.none(f"the plan read no before-image of {op.path}")
    if fact.error:
        return Restore.none(f"{op.path} could not be read before the apply ({fact.error})")
    after = f" && ( {op.after} )" if op.after else ""
    written = written_sha256(op)
    if not fact.exists:
        remove = (f"if [ ! -e {path} ]; then exit 0; fi; "
                  f"if [ \"$(sha256sum < {path} | cut -c1-64)\" = {written} ]; then rm -f {path}{after}; "
                  f"else echo {shlex.quote(op.path + ' changed since the apply: not removed')} >&2; exit 1; fi")
        return Restore(summary=f"removed {op.path} (it did not exist before)", check=f"[ ! -e {path} ]",
                       ops=[RunCommand(command=remove, description=f"remove {op.path}")])
    if fact.content is None:
        return Restore.none(f"{op.path} was too large to keep a copy of ({fact.size} bytes)")
    if hashlib.sha256(fact.content.encode()).hexdigest() != fact.sha256:
        return Restore.none(f"{op.path} is not UTF-8 text: its old bytes were not read back whole")
    mode = format(int(fact.mode or "0644", 8), "o")
    same = (f"[ -f {path} ] && [ \"$(sha256sum < {path} | cut -c1-64)\" = {fact.sha256} ] && "
            f"[ \"$(stat -c '%a %U %G' {path})\" = {shlex.quote(f'{mode} {fact.owner} {fact.group}')} ]")
    write = WriteFile(path=op.path, content=fact.content, mode=fact.mode, owner=fact.owner, group=fact.group,
                      expect_sha256=written, after=op.after)
    return Restore(summary=f"{op.path} back to its {fact.size} bytes before the apply, mode {fact.mode} "
                           f"{fact.owner}:{fact.group}", ops=[write], check=same)
