"""Plan one pull request's head against the live facts, telling apart its own changes from drift main has too."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import git

from reconciler.common.isolate import ChildFailed, LimitExceeded, Limits, run_limited
from reconciler.desired.clusters import load_cluster
from reconciler.desired.loader import OVER_LIMITS, DesiredStateError, LoadedState, LoadLimits, load_dir
from reconciler.desired.source import describe_source
from reconciler.drivers import Driver
from reconciler.drivers.base import without_header
from reconciler.engine.context import Context
from reconciler.engine.ops import WriteFile
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import make_plan, plan_followups
from reconciler.facts.models import ClusterFacts
from reconciler.forge.base import PullRequest
from reconciler.forge.pr_git import display_errors, export_tree
from reconciler.model import DesiredState

Status = Literal["ok", "invalid", "error", "limits"]


@dataclass
class PrPlan:
    """A pull request's head validated and planned against the live facts."""

    number: int
    head_sha: str
    head_ref: str
    subdir: str
    status: Status
    main_plan: Plan
    plan: Plan | None = None
    errors: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    base_commit: str | None = None
    fetch_ref: str = ""
    cluster: str | None = None  # the cluster planned, in a multi-cluster repository

    @property
    def own(self) -> list[Change]:
        """Changes that come from the PR (not drift the main branch's plan shows as well)."""
        return [c for c in self.plan.changing() if not c.drift] if self.plan else []

    @property
    def not_gathered(self) -> list[Change]:
        """Resources the PR touches whose facts were not read this cycle (new nodes, new files)."""
        return [c for c in self.plan.changes if c.action == "unknown"] if self.plan else []

    @property
    def drift(self) -> list[Change]:
        """Unmanaged drift: what the cluster differs from the main branch."""
        return self.main_plan.changing()

    def verdict(self) -> str:
        """no changes / N change(s) on M node(s) / invalid, plus drift and unplanned nodes."""
        if self.status == "invalid":
            return f"invalid: {len(self.errors)} validation error(s)"
        if self.status == "limits":
            return f"over limits: {self.errors[0] if self.errors else 'planning was stopped'}"
        if self.status == "error" or self.plan is None:
            return "error: the plan could not be made"
        own = self.own
        nodes = sorted({c.node for c in own})
        text = f"{len(own)} change(s) on {len(nodes)} node(s)" if own else "no changes"
        extra = []
        if self.plan.unreachable:
            extra.append(f"{len(self.plan.unreachable)} node(s) unreachable")
        if self.not_gathered:
            extra.append(f"{len(self.not_gathered)} resource(s) not planned")
        if self.plan.errors:
            extra.append(f"{len(self.plan.errors)} error(s)")
        if self.drift:
            extra.append(f"{len(self.drift)} drift change(s) already on the cluster")
        return text + (f"; {'; '.join(extra)}" if extra else "")


def _op_key(op: Any) -> tuple[Any, ...]:
    if isinstance(op, WriteFile):
        return ("write", op.path, without_header(op.content), op.mode, op.owner, op.group, op.after)
    return (op.kind, op.model_dump_json(exclude={"description"}))


def drift_key(change: Change) -> tuple[Any, ...]:
    """What makes two changes "the same" across plans of two commits (our file header aside)."""
    if change.ops:
        return (change.node, change.driver, change.resource, change.action, tuple(_op_key(o) for o in change.ops))
    return (change.node, change.driver, change.resource, change.action, change.summary)


def _mark_not_gathered(plan: Plan, facts: ClusterFacts) -> set[str]:
    """Changes that rest on facts nobody gathered (the PR asks for more than main did) become "unknown".

    Every file and stat a driver asks for comes back in the facts (`exists: false` when absent), and the
    commands (mount table, Slurm version, Slurm's view) are asked of every node already; so a change to a
    path that is missing from a node's facts is one that main's gathering did not cover. Returns the drivers
    whose changes were marked.
    """
    marked: set[str] = set()
    for name in list(plan.unreachable):
        if name not in facts.nodes:  # a node the main branch does not have: no facts, not unreachable
            del plan.unreachable[name]
    for change in plan.changes:
        node_facts = facts.nodes.get(change.node)
        if change.driver == "ssh" and node_facts is None:
            change.summary = "a node new in this PR: no facts yet"
        if node_facts is None or not change.changing or not change.resource.startswith("/"):
            continue
        if change.resource not in node_facts.files and change.resource not in node_facts.stats:
            change.action = "unknown"
            change.summary = change.summary or change.resource
            change.ops = []
            marked.add(change.driver)
    return marked


def plan_pull_request(loaded: LoadedState, facts: ClusterFacts, main_plan: Plan, drivers: Sequence[Driver],
                      source: str, base: DesiredState | None = None) -> Plan:
    """Plan LOADED against FACTS; flag as drift every change that main's plan has too. Nothing is decrypted:
    age-encrypted files are compared by ciphertext with BASE's (the main branch's desired state)."""
    ctx = Context(loaded=loaded, source=source, facts=facts, read_secrets=False, base=base)
    plan = make_plan(ctx, drivers)
    if _mark_not_gathered(plan, facts):
        plan.followups = plan_followups(ctx, plan, drivers)  # again: changes resting on facts not gathered do not count
    drift_keys = {drift_key(c) for c in main_plan.changing()}
    for change in plan.changing():
        change.drift = drift_key(change) in drift_keys
    from reconciler.drivers.slurm_workload import SlurmWorkload
    from reconciler.rollout.preview import annotate

    annotate(ctx, plan, SlurmWorkload())  # the waves merging it would go out in
    return plan


def plan_main(base: LoadedState, facts: ClusterFacts, drivers: Sequence[Driver]) -> tuple[Context, Plan]:
    """The main branch's own plan against the live facts: what it shows is unmanaged drift."""
    ctx = Context(loaded=base, source=describe_source(base.root, base.commit), facts=facts)
    return ctx, make_plan(ctx, drivers)


def _load_and_plan(root: Path, sha: str, subdir: str, facts: ClusterFacts, main_plan: Plan,
                   drivers: Sequence[Driver], source: str, load_limits: LoadLimits | None,
                   base: DesiredState | None = None,
                   cluster: str | None = None) -> tuple[Status, list[str], Plan | None]:
    """Validate and plan an exported PR tree (CLUSTER of it, in a multi-cluster repository): the part that runs
    the PR's input, isolated by the caller."""
    try:
        loaded = (load_dir(root, commit=sha, limits=load_limits) if cluster is None
                  else load_cluster(root, cluster, commit=sha, limits=load_limits))
    except DesiredStateError as exc:
        errors = display_errors(exc, root, subdir)
        over = [e for e in errors if f": {OVER_LIMITS}: " in e]
        return ("limits", over, None) if over else ("invalid", errors, None)
    try:
        return "ok", [], plan_pull_request(loaded, facts, main_plan, drivers, source, base)
    except Exception as exc:  # a renderer bug must not stop the other PRs
        return "error", [f"{type(exc).__name__}: {exc}"], None


def build_pr_plan(repo: git.Repo, subdir: str, pr: PullRequest, sha: str, facts: ClusterFacts,
                  main_ctx: Context, main_plan: Plan, drivers: Sequence[Driver], checks: list[str],
                  fetch_ref: str = "", limits: Limits | None = None,
                  load_limits: LoadLimits | None = None, cluster: str | None = None) -> PrPlan:
    """Export, validate and plan one PR head (already fetched; only CLUSTER of a multi-cluster repository)
    against the live facts.

    The tree is exported here (Git reads only, sizes bounded); validating and planning it, the part that
    parses what the PR author wrote, runs in a child process under LIMITS (reconciler/common/isolate.py) when
    given: a PR that breaks one gets status "limits" and the name of the limit.
    """
    name = PurePosixPath(subdir.strip("/")).name or Path(repo.working_dir or ".").name
    result = PrPlan(number=pr.number, head_sha=sha, head_ref=pr.head_ref, subdir=subdir, status="ok",
                    main_plan=main_plan, checks=list(checks), base_commit=main_ctx.loaded.commit,
                    fetch_ref=fetch_ref or f"refs/pull/{pr.number}/head", cluster=cluster)
    with tempfile.TemporaryDirectory(prefix="reconciler-pr-") as tmp:
        root = Path(tmp) / name
        try:
            export_tree(repo, sha, subdir, root)
        except DesiredStateError as exc:
            result.status = "invalid"
            result.errors = display_errors(exc, root, subdir)
            return result
        args = (root, sha, subdir, facts, main_plan, drivers, f"{name} @ {sha[:12]}", load_limits, main_ctx.state,
                cluster)
        try:
            result.status, result.errors, result.plan = (
                run_limited(_load_and_plan, args, limits) if limits is not None else _load_and_plan(*args))
        except LimitExceeded as exc:
            result.status, result.errors = "limits", [f"validating and planning this PR broke the {exc}"]
        except ChildFailed as exc:
            result.status, result.errors = "error", [str(exc)]
    return result
