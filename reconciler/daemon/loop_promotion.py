"""The reconcile loop's promotion gate: a cluster with `after:` in promotion.yaml applies only what the earlier
cluster's daemon promoted (promotion.py decides, promotion_http.py asks), and journals what it holds back and why."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import git

from reconciler.common import clock
from reconciler.daemon import notify
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.leadership import mirror
from reconciler.daemon.loop_core import Common, Notices
from reconciler.daemon.loop_state import LoopState, Target
from reconciler.daemon.promotion import AWAITING_APPROVAL, Decision, Upstream, decide, journal, local
from reconciler.daemon.promotion_http import (
    CLUSTER_KEY,
    PROMOTION_KEY,
    fetch,
    note_applied,
    note_promoted,
)
from reconciler.daemon.promotion_operator import KEY as OPERATOR_KEY
from reconciler.daemon.promotion_steer import Steer, Steering
from reconciler.desired.errors import DesiredStateError
from reconciler.desired.layout import cluster_names
from reconciler.desired.promotion import PROMOTION_FILE, PromotionRule, read_promotion
from reconciler.ha.role import HighAvailability

MAX_LINEAGE = 1000  # commits of the branch head's history considered for promotion


class Promotion:
    """Hold a commit back until the earlier cluster promoted it; remember what each cluster applied, and when."""

    def __init__(self, common: Common, state: LoopState, source: GitSource | None,
                 target_of: Callable[[str | None], Target | None], notices: Notices | None = None,
                 ha: Callable[[], HighAvailability | None] = lambda: None) -> None:
        self.common, self.state, self.source, self.target_of, self.ha = common, state, source, target_of, ha
        self._mirrored: str | None = None  # the operator row last copied beside the lease (a pair's leader)
        self.steering = Steering(common, state, source, notices)
        self.notices = notices
        self.trigger: str | None = None  # the run's trigger when the operator steered this cycle (hotfix, back)

    def gate(self, target: Target) -> Target | None:
        """The target this cluster may reconcile now: TARGET, an older promoted commit, the applied one, or None."""
        cluster = self.common.config.cluster
        if cluster is None or self.source is None:
            return target
        if self.common.store.get(CLUSTER_KEY) != cluster:
            self.common.store.set(CLUSTER_KEY, cluster)
        try:
            rule = self._rule_in_force(target, cluster)
        except (DesiredStateError, OSError) as exc:  # validated with the commit: a file changed under the daemon?
            self.common.log.error("promotion.unreadable", error=str(exc)[:500], keeping=self.state.applied)
            held = Decision(None, target.commit, "promotion-unreadable", f"promotion.yaml: {str(exc)[:300]}")
            previous = self.common.store.get(PROMOTION_KEY) or {}
            self.common.store.set(PROMOTION_KEY, journal(previous, held, after=previous.get("after") or "?",
                                                  source=previous.get("source"), unreachable=None))
            return self.target_of(self.state.applied) if self.state.applied else None  # never ungated
        self.trigger = None
        self._mirror()
        self.steering.hold_after_rollback(rule)
        self.steering.take_back()
        steer = self.steering.steer(target.commit, rule)
        if steer is not None:
            return self._steered(target, rule, steer)
        if rule is None:
            if self.common.store.get(PROMOTION_KEY) is not None:
                self.common.store.set(PROMOTION_KEY, None)  # promotion.yaml no longer names this cluster
            return target
        answers: dict[str, Upstream | None] = {}
        down: dict[str, str] = {}
        if target.commit != self.state.applied:  # else nothing to promote: no earlier daemon is asked
            for name in rule.upstreams:
                answers[name], why = self._ask(name)
                if why is not None:
                    down[name] = why
        previous = self.common.store.get(PROMOTION_KEY) or {}
        rejected = dict(previous.get("rejected") or {})
        # a drift check of the applied commit decides nothing: no `git rev-list` on that path
        lineage = [] if target.commit == self.state.applied else \
            self.source.repo.git.rev_list(f"--max-count={MAX_LINEAGE}", target.commit).split()
        approved = self.steering.approved() if rule.approval == "required" else None
        decision = decide(target.commit, self.state.applied, lineage, answers, rule.soak.total_seconds(),
                          after=rule.after_text, unreachable=down, rejected=rejected, approved=approved,
                          cluster=cluster, here=self.common.store.rolled_back(), require=rule.require)
        for name, upstream in answers.items():  # remember the earlier clusters' rollbacks: never applied here
            if upstream is not None:
                rejected.update({c: {"gate": why.get("gate"), "message": why.get("message"), "at": why.get("at"),
                                     "cluster": name} for c, why in upstream.rolled_back.items() if c in lineage})
        sources = [self.common.config.promotion_sources.get(name) or "?" for name in rule.upstreams]
        record = journal(previous, decision, after=rule.after_text, source=", ".join(sources),
                         unreachable="; ".join(f"{n}: {w}" for n, w in down.items()) if down else None,
                         rejected=rejected)
        self.common.store.set(PROMOTION_KEY, record)
        if (previous.get("holding"), previous.get("reason"), previous.get("apply")) != \
                (record["holding"], record["reason"], record["apply"]):
            self.common.log.info("promotion.decision", after=rule.after_text, apply=decision.apply,
                                 holding=decision.holding,
                          reason=decision.reason, message=decision.message)
            if decision.reason == AWAITING_APPROVAL and self.notices is not None:
                self.notices.send(lambda: notify.promotion_message(
                    f"commit {target.commit[:12]} waits for an approval", [decision.message], cluster, "approval"))
        if decision.apply is None or decision.apply == self.state.applied:
            if target.commit == self.state.applied:
                return target
            return self.target_of(self.state.applied) if self.state.applied else None
        if decision.apply == target.commit:
            return target
        return self.target_of(decision.apply)

    def _steered(self, target: Target, rule: PromotionRule | None, steer: Steer) -> Target | None:
        """Journal what the operator's row decided (for a cluster with a rule) and return its target."""
        applied = self.state.applied
        holding = target.commit if target.commit not in (steer.commit, applied) else None
        decision = Decision(steer.commit if steer.commit != applied else None, holding, steer.reason, steer.message)
        previous = self.common.store.get(PROMOTION_KEY) or {}
        if rule is not None:
            record = journal(previous, decision, after=rule.after_text, source=previous.get("source"),
                             unreachable=None)
            self.common.store.set(PROMOTION_KEY, record)
        if (previous.get("reason"), previous.get("apply"), previous.get("holding")) != \
                (steer.reason, decision.apply, holding):
            self.common.log.info("promotion.decision", apply=decision.apply, holding=holding, reason=steer.reason,
                                 message=steer.message)
        if steer.commit is None:
            return None
        if steer.commit != applied:
            self.trigger = steer.trigger
        return target if steer.commit == target.commit else self.target_of(steer.commit)

    def _rule_in_force(self, target: Target, cluster: str) -> PromotionRule | None:
        """This cluster's rule in TARGET's promotion.yaml, or else in the applied commit's: a commit that drops the
        rule (or the file) is itself promoted under the rule it drops."""
        rule = read_promotion(target.loaded.root).get(cluster)
        if rule is not None or not self.state.applied or self.source is None:
            return rule
        subdir = self.source.cfg.subdir
        try:
            text = self.source.repo.git.show(f"{self.state.applied}:{subdir + '/' if subdir else ''}{PROMOTION_FILE}")
        except git.GitCommandError:  # the applied commit had no promotion.yaml
            return None
        with tempfile.TemporaryDirectory() as scratch:
            (Path(scratch) / PROMOTION_FILE).write_text(text + "\n")
            rules = read_promotion(scratch, clusters=cluster_names(target.loaded.root))
        return rules.get(cluster)

    def _mirror(self) -> None:
        """In a pair, copy the operator's row beside the lease when it changed: a successor adopts it
        (leadership.take_over), so a hold or a pending hotfix outlives a takeover."""
        ha = self.ha()
        if ha is None or not ha.is_leader():
            return
        row = self.common.store.get(OPERATOR_KEY) or {}
        text = json.dumps(row, sort_keys=True)
        if text != self._mirrored:
            mirror(ha, {OPERATOR_KEY: row}, required=False)
            self._mirrored = text

    def _ask(self, name: str) -> tuple[Upstream | None, str | None]:
        """Earlier cluster NAME's answer, its times on this daemon's clock; or None and why there is none."""
        url = self.common.config.promotion_sources.get(name)
        if url is None:
            return None, f"the daemon config has no promotion_sources entry for {name}"
        try:
            upstream = fetch(url)
        except (OSError, ValueError) as exc:
            return None, f"{type(exc).__name__}: {exc}"[:300]
        if upstream.cluster != name:
            return None, f"the daemon at {url} reconciles cluster {upstream.cluster}, not {name}"
        return local(upstream, clock.wall() - upstream.now), None

    def applied(self, target: Target) -> None:
        """TARGET was applied (Applying.mark_applied calls this): with `cluster:` set, the applied log (the next
        cluster's verdict) and the promotion lag."""
        if self.common.config.cluster is None or target.commit.startswith("local:"):
            return
        now = clock.wall()
        checks = target.loaded.state.checks
        expects = bool(self.common.config.checks_after_apply and (checks.node or checks.nccl))
        note_applied(self.common.store, target.commit, now, expects)
        self.steering.applied(target.commit)
        promotion: dict[str, Any] = self.common.store.get(PROMOTION_KEY) or {}
        if promotion.get("apply") == target.commit and promotion.get("upstream_applied_at") is not None:
            note_promoted(self.common.store, target.commit, float(promotion["upstream_applied_at"]), now)
