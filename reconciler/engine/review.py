"""The review step of the driver contract: what a driver concludes from the whole plan, as edits the engine makes.

A driver's `review(ctx, plan)` returns edits instead of changing the plan in place (gitops-engine's sync layer
never lets a resource kind rewrite the sync): a warning, a refusal, a change added, a change replaced by others (a
transaction refused, wrapped in its daemons' steps, or made again knowing a refresh comes first). The engine applies
each driver's edits before the next driver reviews, in the drivers' order, and keeps the plan's errors in step with
its error changes (`make_plan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from reconciler.engine.plan import Change, Plan


@dataclass(frozen=True)
class Warn:
    """A warning the plan shows (said once, however many drivers say it)."""

    message: str


@dataclass(frozen=True)
class Refuse:
    """An error of the whole plan, not of one change (an unreadable Slurm view, accounting database)."""

    message: str


@dataclass(frozen=True)
class Add:
    """A change the driver adds from the whole plan (a backup before a conversion, an owed restart)."""

    change: Change


@dataclass(frozen=True)
class Replace:
    """CHANGE (the plan's own object) replaced by CHANGES, in its place; its error, if it was one, goes with it and
    the errors of CHANGES come."""

    change: Change
    changes: Sequence[Change] = field(default_factory=tuple)


PlanEdit = Warn | Refuse | Add | Replace


def error_of(change: Change) -> str:
    """The plan error an error change stands for."""
    return f"{change.node}: {change.summary}"


def apply_edits(plan: Plan, edits: Sequence[PlanEdit]) -> None:
    """Make EDITS to PLAN, in their order (a Replace of a change no longer in the plan is a driver's bug)."""
    for edit in edits:
        if isinstance(edit, Warn):
            if edit.message not in plan.warnings:
                plan.warnings.append(edit.message)
        elif isinstance(edit, Refuse):
            plan.errors.append(edit.message)
        elif isinstance(edit, Add):
            plan.changes.append(edit.change)
            if edit.change.action == "error":
                plan.errors.append(error_of(edit.change))
        else:
            _replace(plan, edit)


def _replace(plan: Plan, edit: Replace) -> None:
    index = next((i for i, c in enumerate(plan.changes) if c is edit.change), None)
    if index is None:
        raise ValueError(f"review replaced a change not in the plan: {edit.change.node} {edit.change.resource}")
    if edit.change.action == "error" and (gone := error_of(edit.change)) in plan.errors:
        plan.errors.remove(gone)
    plan.changes[index:index + 1] = list(edit.changes)
    plan.errors += [error_of(c) for c in edit.changes if c.action == "error"]
