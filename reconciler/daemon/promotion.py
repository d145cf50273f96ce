"""Promotion between clusters: which commit this cluster may apply, decided from the earlier cluster's answer.

Pure: the earlier cluster's daemon answers /promotion.json (promotion_http.py builds and fetches it); this module
reads that answer and decides. A commit is promoted once the earlier cluster applied it, was clean (no failing
health check) for the soak since, and never rolled it back; only commits of this cluster's branch count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconciler.common import clock

# Why a commit is held back (the journal's and the status's `reason`).
NOT_APPLIED, SOAKING, UNHEALTHY, ROLLED_BACK, SUPERSEDED, UNREACHABLE, UNCHECKED = (
    "not-applied-upstream", "soaking", "unhealthy-upstream", "rolled-back-upstream", "superseded-upstream",
    "upstream-unreachable", "checks-pending-upstream")
# Why, when this cluster's operator steers it (promotion_steer.py).
AWAITING_APPROVAL, HELD, OUTSIDE_WINDOW, HOTFIX, ROLLED_BACK_HERE = (
    "approval-required", "held", "outside-window", "hotfix", "rolled-back-here")


@dataclass(frozen=True)
class AppliedUpstream:
    """One commit the earlier cluster applied: when, until when (a newer one replaced it), clean since when."""

    applied_at: float
    until: float | None = None
    clean_since: float | None = None  # None: a health check failed after the apply and never passed again
    checks: bool = False  # the earlier cluster's desired state has health checks, run after an apply
    checked: bool = True  # a health check ran there after this apply


@dataclass(frozen=True)
class Upstream:
    """The earlier cluster's answer (/promotion.json), times on its own clock."""

    cluster: str
    now: float
    applied_commit: str | None = None
    applied: dict[str, AppliedUpstream] = field(default_factory=dict)
    rolled_back: dict[str, dict[str, Any]] = field(default_factory=dict)
    failing: list[str] = field(default_factory=list)  # its latest failing health checks, one line each


def parse_upstream(data: Any) -> Upstream:
    """An Upstream from the decoded /promotion.json; ValueError when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("cluster"), str):
        raise ValueError("not a promotion answer (no `cluster`)")
    try:
        applied = {str(commit): AppliedUpstream(float(item["applied_at"]),
                                                None if item.get("until") is None else float(item["until"]),
                                                None if item.get("clean_since") is None else float(item["clean_since"]),
                                                bool(item.get("checks", False)), bool(item.get("checked", True)))
                   for commit, item in dict(data.get("applied") or {}).items()}
        rolled = {str(c): dict(why or {}) for c, why in dict(data.get("rolled_back") or {}).items()}
        return Upstream(cluster=data["cluster"], now=float(data["now"]), applied_commit=data.get("applied_commit"),
                        applied=applied, rolled_back=rolled, failing=[str(f) for f in data.get("failing") or []])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"malformed promotion answer: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class Verdict:
    """Whether one commit may be applied here, and if not, why."""

    ok: bool
    reason: str = ""
    message: str = ""
    remaining: float | None = None  # seconds of soak left (reason `soaking`)


@dataclass(frozen=True)
class Decision:
    """What this cluster does now: apply a promoted commit (or keep its own), and what it holds back and why."""

    apply: str | None  # the commit to apply now; None: keep the applied one
    holding: str | None = None  # the branch head held back (None: nothing is)
    reason: str = ""
    message: str = ""
    remaining: float | None = None
    upstream_applied_at: float | None = None  # when the earlier cluster applied `apply` (its clock)


def judge(commit: str, upstream: Upstream, soak: float, rejected: dict[str, Any] | None = None) -> Verdict:
    """Whether the earlier cluster's answer promotes COMMIT (REJECTED: rollbacks it reported before)."""
    after = upstream.cluster
    why = upstream.rolled_back.get(commit) or (rejected or {}).get(commit)
    if why is not None:
        gate = f" (gate {why.get('gate')}: {why.get('message')})" if why.get("gate") else ""
        return Verdict(False, ROLLED_BACK, f"{why.get('cluster') or after} rolled it back{gate}: never applied here")
    record = upstream.applied.get(commit)
    if record is None:
        at = f"; {after} is at {upstream.applied_commit[:12]}" if upstream.applied_commit else ""
        return Verdict(False, NOT_APPLIED, f"waiting for {after} to apply it{at}")
    end = record.until if record.until is not None else upstream.now
    if record.until is None and upstream.failing:
        return Verdict(False, UNHEALTHY, f"{after} is unhealthy ({'; '.join(upstream.failing[:3])}): the soak "
                       "starts again once its checks pass")
    if record.clean_since is None:
        return Verdict(False, UNHEALTHY, f"{after} was unhealthy while it ran this commit")
    if record.checks and not record.checked:
        return Verdict(False, UNCHECKED, f"waiting for {after}'s health checks to run after it applied it")
    elapsed = end - max(record.applied_at, record.clean_since)
    if elapsed >= soak:
        return Verdict(True)
    if record.until is not None:
        return Verdict(False, SUPERSEDED, f"{after} moved on to a newer commit after {elapsed:.0f}s of the "
                       f"{soak:.0f}s soak")
    remaining = soak - elapsed
    return Verdict(False, SOAKING, f"soaking on {after}: {remaining:.0f}s of {soak:.0f}s left", remaining)


def approve(verdict: Verdict, commit: str, approved: set[str] | None, cluster: str) -> Verdict:
    """VERDICT, unless an approval is needed (APPROVED not None) and COMMIT has none."""
    if not verdict.ok or approved is None or commit in approved:
        return verdict
    return Verdict(False, AWAITING_APPROVAL, f"its upstream verdict holds; waiting for an approval: reconciler "
                   f"promote approve {commit[:12]} --cluster {cluster}")


Upstreams = dict[str, Upstream | None]  # each earlier cluster's answer by name (None: it did not answer)


def decide(head: str, applied: str | None, lineage: list[str], upstream: Upstream | None | Upstreams, soak: float,
           *, after: str, unreachable: str | dict[str, str] | None = None, rejected: dict[str, Any] | None = None,
           approved: set[str] | None = None, cluster: str = "this cluster", here: dict[str, Any] | None = None,
           require: str = "all") -> Decision:
    """What to apply of this cluster's branch.

    HEAD: the branch head (validated); APPLIED: this cluster's applied commit; LINEAGE: HEAD's history, newest
    first (`git rev-list HEAD`); UPSTREAM: the earlier cluster's answer (AFTER names it), None when it could not be
    had (UNREACHABLE says why), or with several earlier clusters their answers by name, REQUIRE `all` of them or
    `any` one to promote a commit (times already on this daemon's clock: `local`). The newest commit of LINEAGE
    newer than APPLIED that the answers promote is applied; HEAD, when not promoted itself, is held back with its
    reason. A commit any earlier cluster rolled back is never promoted. APPROVED (approval required): the commits
    approved here; any other is held back, whatever the upstream says (an approval names one commit, not those
    after it). HERE: the commits this cluster rolled back (or went back from): never chosen again.
    """
    answers: Upstreams = upstream if isinstance(upstream, dict) else {after: upstream}
    why_down = unreachable if isinstance(unreachable, dict) else \
        {name: unreachable or "no answer" for name, answer in answers.items() if answer is None}
    if head == applied:
        return Decision(None)
    live = {name: answer for name, answer in answers.items() if answer is not None}
    down = [name for name, answer in answers.items() if answer is None]
    if not live or (require == "all" and down):
        return Decision(None, head, UNREACHABLE, "; ".join(f"{name}'s daemon did not answer "
                                                           f"({why_down.get(name) or 'no answer'})" for name in down)
                        + ": waiting, nothing is promoted without its verdict")
    newer = lineage[:lineage.index(applied)] if applied in lineage else list(lineage)
    if head not in newer:
        newer.insert(0, head)
    judged = {commit: _combined(commit, live, soak, rejected, require) for commit in newer}
    verdicts = {commit: _here(commit, here) or approve(judged[commit][0], commit, approved, cluster)
                for commit in newer}
    chosen = next((c for c in newer if verdicts[c].ok), None)
    at = judged[chosen][1] if chosen else None
    held = verdicts[head]
    if held.ok:
        return Decision(head, upstream_applied_at=at)
    return Decision(chosen, head, held.reason, held.message, held.remaining, at)


def _combined(commit: str, live: dict[str, Upstream], soak: float, rejected: dict[str, Any] | None,
              require: str) -> tuple[Verdict, float | None]:
    """The earlier clusters' verdict on COMMIT (all of them or any one, REQUIRE), and when the first of those that
    promote it applied it."""
    verdicts = {name: judge(commit, answer, soak, rejected) for name, answer in live.items()}
    if len(verdicts) == 1:
        [(name, verdict)] = verdicts.items()
        return verdict, live[name].applied[commit].applied_at if verdict.ok else None
    refused = next((v for v in verdicts.values() if v.reason == ROLLED_BACK), None)
    if refused is not None:  # a rollback anywhere is a verdict of its own: never promoted
        return refused, None
    passed = [name for name, verdict in verdicts.items() if verdict.ok]
    if passed and (require == "any" or len(passed) == len(verdicts)):
        return Verdict(True), min(live[name].applied[commit].applied_at for name in passed)
    waiting = [v for v in verdicts.values() if not v.ok]
    first = waiting[0]
    need = "any one of" if require == "any" else "all of"
    return Verdict(False, first.reason, f"needs {need} {', '.join(verdicts)}: "
                   + "; ".join(v.message for v in waiting), min((v.remaining for v in waiting
                                                                 if v.remaining is not None), default=None)), None


def local(upstream: Upstream, offset: float) -> Upstream:
    """UPSTREAM with its times moved onto this daemon's clock (OFFSET: this clock minus the earlier daemon's)."""
    def move(value: float | None) -> float | None:
        return None if value is None else value + offset

    applied = {commit: AppliedUpstream(record.applied_at + offset, move(record.until), move(record.clean_since),
                                       record.checks, record.checked)
               for commit, record in upstream.applied.items()}
    return Upstream(upstream.cluster, upstream.now + offset, upstream.applied_commit, applied, upstream.rolled_back,
                    upstream.failing)


def _here(commit: str, here: dict[str, Any] | None) -> Verdict | None:
    """A Verdict against COMMIT when this cluster rolled it back (HERE), else None."""
    why = (here or {}).get(commit)
    if why is None:
        return None
    return Verdict(False, ROLLED_BACK_HERE, f"rolled back here (gate {why.get('gate')}: "
                   f"{str(why.get('message') or '')[:200]}): not applied again until `reconciler rollout retry "
                   f"{commit[:12]}`")


def journal(previous: dict[str, Any] | None, decision: Decision, *, after: str, source: str | None,
            unreachable: str | None, now: float | None = None, rejected: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """The decision as this cluster's store keeps it; `since` and `unreachable_since` carry over from PREVIOUS
    while the same commit is held for the same reason (or the earlier daemon stays unreachable)."""
    now = clock.wall() if now is None else now
    before = previous or {}
    same = before.get("holding") == decision.holding and before.get("reason") == decision.reason
    down_since = before.get("unreachable_since") if before.get("unreachable_since") else now
    return {"after": after, "source": source, "checked_at": now, "apply": decision.apply,
            "holding": decision.holding, "reason": decision.reason, "message": decision.message,
            "remaining": decision.remaining, "since": before.get("since", now) if same else now,
            "upstream_applied_at": decision.upstream_applied_at,
            "unreachable_since": down_since if unreachable is not None else None, "error": unreachable,
            "rejected": {**dict(before.get("rejected") or {}), **(rejected or {})}}
