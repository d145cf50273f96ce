"""Plan every open pull request against the live cluster and keep one comment per PR up to date.

Each cycle the daemon gathers facts for the main branch's desired state; this module reuses those facts
for every open PR (no extra SSH round trip): it fetches the PR head through Git, exports its YAML files
(only regular files, never symlinks; nothing from the PR is executed, here or on a node), validates and
plans it, and tells apart what the PR changes from drift the cluster already has against main. A PR is
re-planned and re-commented only when its head or the fingerprint of the facts changed.

The parts: pr_git.py fetches and exports a PR head, pr_planning.py plans it, pr_comment.py renders the comment;
this module is the daemon's loop over the open PRs and the record of what was reported. In a multi-cluster
repository (CLUSTER given) the daemon plans only its own cluster and writes only its own section of the comment
(pr_clusters.py); a cached report is trusted only while that section is still in the comment.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import git

from reconciler.common.isolate import Limits
from reconciler.desired.loader import LoadedState, LoadLimits
from reconciler.drivers import Driver, all_drivers
from reconciler.engine.context import Context
from reconciler.engine.plan import Plan
from reconciler.engine.report import MARKER
from reconciler.facts.models import ClusterFacts
from reconciler.forge.base import Forge, ForgeError, PullRequest, Upserted, redact
from reconciler.forge.pr_clusters import ClusterPr, is_current, report_cluster_pr
from reconciler.forge.pr_comment import RENDER_VERSION, render_pr_comment
from reconciler.forge.pr_git import PrFetchError, fetch_pr_head
from reconciler.forge.pr_planning import PrPlan, build_pr_plan, plan_main

DEFAULT_LIMITS = Limits()  # per PR: CPU time, memory, wall clock (the daemon's config may set others)

ResultStatus = Literal["created", "edited", "unchanged", "skipped", "failed"]


@dataclass
class PrReportResult:
    """What happened to one open pull request this cycle."""

    number: int
    head_sha: str
    status: ResultStatus
    verdict: str = ""
    comment_id: int | None = None
    error: str | None = None


# ---------------------------------------------------------------- cache of what was reported


def facts_fingerprint(facts: ClusterFacts, base: LoadedState, checks_status: Sequence[str]) -> str:
    """A hash of the facts, main's commit and the health-check status: a PR is re-planned when it changes."""
    doc = {"facts": facts.model_dump(mode="json"), "base": base.commit, "checks": list(checks_status),
           "render": RENDER_VERSION}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass
class Reported:
    """The last report of one PR."""

    head_sha: str
    facts_fingerprint: str
    comment_id: int | None


_MEMORY: dict[tuple[str, int], Reported] = {}


class ReportCache:
    """What was last reported per (forge, PR): in the daemon's sqlite database, or in memory without one."""

    def __init__(self, conn: sqlite3.Connection | None) -> None:
        self.conn = conn
        if conn is not None:
            conn.execute("CREATE TABLE IF NOT EXISTS pr_reports (forge TEXT NOT NULL, pr INTEGER NOT NULL, "
                         "head_sha TEXT NOT NULL, facts_fingerprint TEXT NOT NULL, comment_id INTEGER, "
                         "updated REAL NOT NULL, PRIMARY KEY (forge, pr))")
            conn.commit()

    def get(self, forge: str, pr: int) -> Reported | None:
        """The last report of a PR, if any."""
        if self.conn is None:
            return _MEMORY.get((forge, pr))
        row = self.conn.execute("SELECT head_sha, facts_fingerprint, comment_id FROM pr_reports "
                                "WHERE forge = ? AND pr = ?", (forge, pr)).fetchone()
        return Reported(row[0], row[1], row[2]) if row else None

    def put(self, forge: str, pr: int, reported: Reported) -> None:
        """Remember a report."""
        if self.conn is None:
            _MEMORY[(forge, pr)] = reported
            return
        self.conn.execute("INSERT OR REPLACE INTO pr_reports (forge, pr, head_sha, facts_fingerprint, comment_id, "
                          "updated) VALUES (?, ?, ?, ?, ?, ?)",
                          (forge, pr, reported.head_sha, reported.facts_fingerprint, reported.comment_id, time.time()))
        self.conn.commit()

    def forget_closed(self, forge: str, open_prs: set[int]) -> None:
        """Drop the rows of PRs that are no longer open."""
        if self.conn is None:
            for key in [k for k in _MEMORY if k[0] == forge and k[1] not in open_prs]:
                del _MEMORY[key]
            return
        rows = self.conn.execute("SELECT pr FROM pr_reports WHERE forge = ?", (forge,)).fetchall()
        for (pr,) in rows:
            if pr not in open_prs:
                self.conn.execute("DELETE FROM pr_reports WHERE forge = ? AND pr = ?", (forge, pr))
        self.conn.commit()


def _prune_refs(repo: git.Repo, open_prs: set[int]) -> None:
    """Delete refs/reconciler/pr/N of PRs that are no longer open."""
    listing = repo.git.for_each_ref("--format=%(refname)", "refs/reconciler/pr/")
    for ref in listing.split():
        match = re.fullmatch(r"refs/reconciler/pr/(\d+)", ref)
        if match and int(match.group(1)) not in open_prs:
            repo.git.update_ref("-d", ref)


def _section_kept(forge: Forge, pr: PullRequest, cluster: str, fingerprint: str, log: Any) -> bool:
    """True when the comment still holds CLUSTER's section as reported (a forge error: assume so, retry later)."""
    try:
        return is_current(forge, pr, cluster, pr.head_sha, fingerprint)
    except ForgeError as exc:
        log.warning("prs.comment_read_failed", pr=pr.number, error=str(exc), transient=exc.transient)
        return True


# ---------------------------------------------------------------- the daemon's entry point


def report_pull_requests(repo: git.Repo, subdir: str, forge: Forge, facts: ClusterFacts, base: LoadedState,
                         conn: sqlite3.Connection | None, checks_status: list[str], log: Any, *,
                         remote: str = "origin", drivers: Sequence[Driver] | None = None,
                         limits: Limits | None = DEFAULT_LIMITS,
                         load_limits: LoadLimits | None = None,
                         cluster: str | None = None, promotion: Sequence[str] = ()) -> list[PrReportResult]:
    """Plan every open PR against this cycle's facts and upsert its comment, when its head or the facts changed.

    Each PR is validated and planned in a child process under LIMITS (None: in this process); one that
    breaks them gets a comment naming the limit, and the next PR is planned. CLUSTER: this daemon's cluster of
    a multi-cluster repository (BASE is that cluster's state): only its section of each comment is written, with
    PROMOTION (its promotion's state, a line each) at its end.
    """
    drivers = list(drivers) if drivers is not None else all_drivers()
    cache = ReportCache(conn)
    ident = forge.ident if cluster is None else f"{forge.ident}#{cluster}"
    try:
        prs = forge.open_pull_requests()
    except ForgeError as exc:
        log.warning("prs.list_failed", forge=forge.kind, error=str(exc), transient=exc.transient)
        return []
    fingerprint = facts_fingerprint(facts, base, [*checks_status, *promotion])
    main: tuple[Context, Plan] | None = None
    results = []
    for pr in sorted(prs, key=lambda p: p.number):
        last = cache.get(ident, pr.number)
        if last is not None and last.head_sha == pr.head_sha and last.facts_fingerprint == fingerprint \
                and (cluster is None or _section_kept(forge, pr, cluster, fingerprint, log)):
            results.append(PrReportResult(pr.number, pr.head_sha, "skipped", comment_id=last.comment_id))
            continue
        try:
            sha = fetch_pr_head(repo, forge, pr.number, remote)
        except PrFetchError as exc:
            log.warning("prs.fetch_failed", pr=pr.number, error=str(exc))
            results.append(PrReportResult(pr.number, pr.head_sha, "failed", error=str(exc)))
            continue
        if main is None:
            try:
                main = plan_main(base, facts, drivers)
            except Exception as exc:  # main's own plan failing is the daemon's to report; no PR can be judged
                log.error("prs.main_plan_failed", error=f"{type(exc).__name__}: {exc}")
                return results
        report: PrPlan | None
        write: Callable[[], Upserted]
        if cluster is None:
            report = build_pr_plan(repo, subdir, pr, sha, facts, main[0], main[1], drivers, checks_status,
                                   forge.pr_ref(pr.number), limits=limits, load_limits=load_limits)
            body = render_pr_comment(report, limit=min(forge.comment_limit, 65_536) - 1)
            verdict = report.verdict()
            write = partial(forge.upsert_comment, pr, body, MARKER)
        else:
            job = ClusterPr(cluster, facts, main[0], main[1], drivers, checks_status, fingerprint, limits,
                            load_limits, list(promotion))
            verdict, write, report = report_cluster_pr(repo, subdir, forge, pr, sha, job)
        if report is not None and report.status == "limits":
            log.warning("prs.over_limits", pr=pr.number, sha=sha[:12], error=report.errors[0][:300])
        try:
            upserted: Upserted = write()
        except (ForgeError, ValueError) as exc:
            transient = isinstance(exc, ForgeError) and exc.transient
            log.warning("prs.comment_failed", pr=pr.number, error=str(exc), transient=transient)
            results.append(PrReportResult(pr.number, sha, "failed", verdict=verdict, error=str(exc)))
            continue
        cache.put(ident, pr.number, Reported(sha, fingerprint, upserted.comment.id))
        log.info("prs.reported", pr=pr.number, sha=sha[:12], verdict=verdict, comment=upserted.action,
                 chars=len(body if cluster is None else upserted.comment.body),
                 **({"cluster": cluster} if cluster else {}))
        results.append(PrReportResult(pr.number, sha, upserted.action, verdict=verdict,
                                      comment_id=upserted.comment.id))
    open_numbers = {p.number for p in prs}
    cache.forget_closed(ident, open_numbers)
    try:
        _prune_refs(repo, open_numbers)
    except git.GitCommandError as exc:
        log.warning("prs.prune_failed", error=redact(str(exc))[:300])
    return results
