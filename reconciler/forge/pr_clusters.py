"""One cluster daemon's share of a PR comment in a multi-cluster repository.

The daemon works out which clusters the PR touches (its tree against the main branch's, every cluster merged:
reconciler/desired/cluster_diff.py), plans only its own cluster against its own live facts when the PR touches
it, and writes its own section of the one comment (pr_sections.py) by read-modify-write (pr_shared_comment.py).
Loading the PR's clusters parses what the PR author wrote: it runs under the same limits as planning.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import git

from reconciler.common.isolate import ChildFailed, LimitExceeded, Limits, run_limited
from reconciler.desired.cluster_diff import touched_clusters
from reconciler.desired.clusters import cluster_names
from reconciler.desired.loader import DesiredStateError, LoadLimits
from reconciler.drivers import Driver
from reconciler.engine.context import Context
from reconciler.engine.plan import Plan
from reconciler.engine.report import MARKER
from reconciler.facts.models import ClusterFacts
from reconciler.forge.base import Forge, PullRequest, Upserted
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_git import export_tree
from reconciler.forge.pr_planning import PrPlan, build_pr_plan
from reconciler.forge.pr_sections import ClusterView, compose, section_is_current
from reconciler.forge.pr_shared_comment import update_shared_comment


def _view(old: Path, new: Path, load_limits: LoadLimits | None) -> ClusterView:
    """The clusters of NEW the change touches and does not, and those of OLD it removes."""
    touched = touched_clusters(old, new, load_limits)
    return ClusterView(touched=sorted(n for n, t in touched.items() if t),
                       untouched=sorted(n for n, t in touched.items() if not t),
                       removed=sorted(set(cluster_names(old)) - set(touched)))


def cluster_view(repo: git.Repo, subdir: str, base_commit: str, sha: str, cluster: str, limits: Limits | None,
                 load_limits: LoadLimits | None) -> ClusterView:
    """Which clusters commit SHA touches against BASE_COMMIT; when that cannot be worked out, CLUSTER alone is
    taken as touched (its section says why its plan failed, if it did) and the header says so."""
    with tempfile.TemporaryDirectory(prefix="reconciler-pr-") as tmp:
        old, new = Path(tmp) / "main", Path(tmp) / "pr"
        try:
            export_tree(repo, base_commit, subdir, old)
            export_tree(repo, sha, subdir, new)
            view = run_limited(_view, (old, new, load_limits), limits) if limits is not None \
                else _view(old, new, load_limits)
        except DesiredStateError as exc:
            view = ClusterView(error="; ".join(str(e) for e in exc.errors)[:500])
        except LimitExceeded as exc:
            view = ClusterView(error=f"working it out broke the {exc}")
        except ChildFailed as exc:
            view = ClusterView(error=str(exc)[:500])
    if view.error:
        view.touched = [cluster]
    return view


def own_section(report: PrPlan, budget: int, promotion: Sequence[str] = ()) -> str:
    """The cluster's plan as its section: the single-cluster comment under a `### Cluster` title, then PROMOTION
    (what its promotion does with a merged commit: approval, hold, windows), a line each."""
    tail = "".join(f"{line}  \n" for line in promotion)
    text = render_pr_comment(report, limit=max(500, budget - len(tail) - 2))
    title = f"{MARKER}\n### Reconciler plan for #{report.number}\n"
    text = text[len(title):] if text.startswith(title) else text.removeprefix(MARKER + "\n")
    return f"### Cluster `{report.cluster}`\n" + text + (f"\n{tail}" if tail else "")


def is_current(forge: Forge, pr: PullRequest, cluster: str, head: str, fp: str) -> bool:
    """True when our comment still holds what CLUSTER's daemon last wrote (another write may have erased it)."""
    found = forge.find_comment(pr, MARKER)
    return found is not None and section_is_current(found.body, cluster, head, fp[:16])


@dataclass
class ClusterPr:
    """What one cluster's daemon needs to plan and report a PR: its cluster, main's plan, this cycle's facts."""

    cluster: str
    facts: ClusterFacts
    main_ctx: Context
    main_plan: Plan
    drivers: Sequence[Driver]
    checks: list[str]
    fingerprint: str
    limits: Limits | None
    load_limits: LoadLimits | None
    promotion: list[str] = field(default_factory=list)  # its promotion's state, shown at its section's end


def report_cluster_pr(repo: git.Repo, subdir: str, forge: Forge, pr: PullRequest, sha: str,
                      job: ClusterPr) -> tuple[str, Callable[[], Upserted], PrPlan | None]:
    """Plan JOB's cluster of the PR when the PR touches it; return the verdict, the write of its section, and the
    plan (None when not touched)."""
    base_commit = job.main_ctx.loaded.commit or str(repo.head.commit.hexsha)
    view = cluster_view(repo, subdir, base_commit, sha, job.cluster, job.limits, job.load_limits)
    report: PrPlan | None = None
    verdict = f"not touched: cluster {job.cluster}'s desired state is the same as on the main branch"
    if job.cluster in view.removed:
        verdict = f"removes cluster {job.cluster}"
    if job.cluster in view.touched:
        report = build_pr_plan(repo, subdir, pr, sha, job.facts, job.main_ctx, job.main_plan, job.drivers,
                               job.checks, forge.pr_ref(pr.number), limits=job.limits,
                               load_limits=job.load_limits, cluster=job.cluster)
        verdict = report.verdict()
    limit = min(forge.comment_limit, 65_536) - 1
    planned = report

    def render(old: str | None) -> str:
        return compose(old, number=pr.number, head_sha=sha, head_ref=pr.head_ref, view=view, cluster=job.cluster,
                       fp=job.fingerprint[:16],
                       own=(lambda budget: own_section(planned, budget, job.promotion)) if planned else None,
                       limit=limit)

    return verdict, lambda: update_shared_comment(forge, pr, render), report
