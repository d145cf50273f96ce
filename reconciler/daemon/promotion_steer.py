"""What the operator's promotion commands (promotion_operator.py) make the promotion gate do, cycle by cycle.

Before the upstream's verdict is asked: a rollback by this cluster's own gates holds further promotion
(`hold_after_rollback`); a `back` is taken (the applied commit is marked rolled back here, the one applied before
it pinned and held); a pending hotfix is applied through the cluster's own rollout and gates, without the
upstream's verdict or soak; a hold keeps the pinned or applied commit (drift still healed); outside the promotion
windows nothing new is promoted. Hotfix and back ignore the windows: they are a human's call for now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import git

from reconciler.common import clock
from reconciler.daemon import notify
from reconciler.daemon.git_source import GitSource
from reconciler.daemon.loop_core import Common, Notices
from reconciler.daemon.loop_state import LoopState
from reconciler.daemon.promotion import HELD, HOTFIX, OUTSIDE_WINDOW
from reconciler.daemon.promotion_http import APPLIED_LOG_KEY
from reconciler.daemon.promotion_operator import HOTFIXES, by, note, previous_applied, request, update
from reconciler.desired.promotion import PromotionRule
from reconciler.rollout.windows import state_at


@dataclass(frozen=True)
class Steer:
    """The commit the gate reconciles this cycle instead of the upstream's decision, and why."""

    commit: str | None
    reason: str
    message: str
    trigger: str | None = None  # the run's trigger when it applies something new (hotfix, back)


class Steering:
    """The operator's row, read and acted on by the promotion gate."""

    def __init__(self, common: Common, state: LoopState, source: GitSource | None, notices: Notices | None) -> None:
        self.common, self.state, self.source, self.notices = common, state, source, notices
        self._hold_seen: Any = ...  # the hold last seen (notified on change, not on a restart)

    @property
    def _path(self) -> Any:
        return self.common.store.path

    def _tell(self, title: str, lines: list[str], key: str) -> None:
        if self.notices is not None:
            cluster = self.common.config.cluster
            self.notices.send(lambda: notify.promotion_message(title, lines, cluster, key))

    def hold_after_rollback(self, rule: PromotionRule | None) -> None:
        """Hold promotion when this cluster's gates rolled a commit back since the last look (RULE permitting)."""
        rolled = self.common.store.rolled_back()

        def change(row: dict[str, Any], _: dict[str, Any]) -> dict[str, Any] | None:
            seen = row.get("rollbacks_seen")
            if seen is None:  # the first look: earlier rollbacks are history, not a reason to hold now
                row["rollbacks_seen"] = sorted(rolled)
                return None
            fresh = [c for c in rolled if c not in seen]
            if not fresh:
                return None
            row["rollbacks_seen"] = [*seen, *fresh][-200:]
            ours = [c for c in fresh if (rolled[c] or {}).get("gate") != "operator"]
            if not ours or rule is None or not rule.hold_after_rollback or row.get("hold"):
                return None
            commit, why = ours[-1], rolled[ours[-1]] or {}
            req = request("hold", commit, "reconciler", f"gate {why.get('gate')} failed on {commit[:12]}: "
                          f"{str(why.get('message') or '')[:120]}; rolled back")
            row["hold"] = {**req, "kind": "rollback", "pin": None}
            note(row, req, "held after a rollback by this cluster's own gates (promotion.yaml hold_after_rollback)")
            return dict(row["hold"])

        held = update(self._path, change)
        if held:
            self.common.log.warning("promotion.held", kind="rollback", commit=held["commit"], reason=held["reason"])
            self._hold_seen = held.get("at")
            self._tell(f"promotion held after commit {held['commit'][:12]} was rolled back",
                       [held["reason"], "Nothing new is promoted until `reconciler promote release`."], "hold")

    def take_back(self) -> None:
        """Act on a `promote back`: mark the applied commit rolled back here, pin the one before, hold."""
        def change(row: dict[str, Any], meta: dict[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
            back = row.get("back")
            if not back:
                return None
            row["back"] = None
            applied = meta.get("applied_commit")
            before = previous_applied(meta.get(APPLIED_LOG_KEY), applied)
            if not applied or before is None:
                note(row, back, "not taken: no commit was applied before the applied one")
                return None
            row["hold"] = {**back, "kind": "back", "pin": before, "from": applied}
            note(row, back, f"going back from {applied[:12]} to {before[:12]}; held until released")
            return applied, before, back

        took = update(self._path, change)
        if took is None:
            return
        applied, before, back = took
        self._hold_seen = back.get("at")
        self.common.store.mark_rolled_back(applied, {"gate": "operator", "message": f"went back to {before[:12]} "
                                                     f"(reconciler promote back by {by(back)})", "nodes": [],
                                                     "at": clock.wall(), "status": "went-back"})
        self.common.log.warning("promotion.back", commit=applied, to=before, who=back.get("who"),
                                reason=back.get("reason"))
        self._tell(f"going back from {applied[:12]} to {before[:12]}",
                   [f"Asked by {by(back)}.", f"{applied[:12]} is not applied here again (until `reconciler rollout "
                    f"retry {applied[:12]}`); promotion is held until `reconciler promote release`."], "back")

    def steer(self, head: str, rule: PromotionRule | None) -> Steer | None:
        """What the operator's row makes this cycle reconcile, or None: the upstream's verdict decides."""
        row = update(self._path, lambda row, _: dict(row))
        applied = self.state.applied
        hotfix = row.get("hotfix")
        if hotfix:
            problem = self._hotfix_problem(str(hotfix["commit"]), head, rule)
            if problem is None:
                return Steer(str(hotfix["commit"]), HOTFIX, f"hotfix {hotfix['commit'][:12]} asked by {by(hotfix)}",
                             "hotfix")
            self._drop_hotfix(hotfix, problem)
        hold = row.get("hold")
        self._notice_hold(hold)
        if hold:
            pin = hold.get("pin") or applied
            what = {"back": f"went back from {str(hold.get('from'))[:12]}", "rollback": "after a rollback",
                    "manual": "held"}.get(str(hold.get("kind")), "held")
            return Steer(pin, HELD, f"{what} ({by(hold)}); `reconciler promote release` lets promotion go on",
                         "back" if pin != applied else None)
        if rule is not None and rule.windows:
            where = state_at(rule.windows, clock.utcnow())
            if where is not None and not where.inside:
                return Steer(applied, OUTSIDE_WINDOW, f"outside the promotion windows: {where.text()}")
        return None

    def approved(self) -> set[str]:
        """The commits approved here."""
        return set(update(self._path, lambda row, _: list(row.get("approvals") or {})))

    def applied(self, commit: str) -> None:
        """COMMIT was applied: a pending hotfix of it is done (and a hold's pin moves to it)."""
        def change(row: dict[str, Any], _: dict[str, Any]) -> dict[str, Any] | None:
            hotfix = row.get("hotfix")
            if not hotfix or hotfix.get("commit") != commit:
                return None
            row["hotfix"] = None
            row["hotfixes"] = [*row.get("hotfixes", []), {**hotfix, "applied_at": clock.wall()}][-HOTFIXES:]
            note(row, hotfix, "applied as a hotfix")
            if row.get("hold") and row["hold"].get("pin"):
                row["hold"]["pin"] = commit  # a hold does not take the hotfix back
            return dict(hotfix)

        done = update(self._path, change)
        if done:
            self.common.log.warning("promotion.hotfix_applied", commit=commit, who=done.get("who"),
                                    reason=done.get("reason"))
            self._tell(f"hotfix {commit[:12]} applied", [f"Asked by {by(done)}.", "Applied through this cluster's "
                       "rollout and gates, without its upstream's verdict or soak."], "hotfix")

    def _hotfix_problem(self, commit: str, head: str, rule: PromotionRule | None) -> str | None:
        """Why the hotfix of COMMIT cannot be applied (None: it can)."""
        rolled = self.common.store.rolled_back().get(commit)
        if rolled is not None:
            return f"its rollout rolled it back (gate {rolled.get('gate')}: {str(rolled.get('message'))[:120]})"
        if rule is None:
            return "this cluster is promoted after no other (promotion.yaml): it applies its branch head anyway"
        if not self._ancestor(commit, head):
            return f"not a commit of the branch's history (head {head[:12]})"
        if self.state.applied and self._ancestor(commit, self.state.applied):
            return "older than the applied commit: `reconciler promote back` goes back"
        return None

    def _ancestor(self, older: str, newer: str) -> bool:
        if self.source is None:
            return False
        try:
            self.source.repo.git.merge_base("--is-ancestor", older, newer)
        except git.GitCommandError:
            return False
        return True

    def _drop_hotfix(self, hotfix: dict[str, Any], problem: str) -> None:
        def change(row: dict[str, Any], _: dict[str, Any]) -> None:
            if (row.get("hotfix") or {}).get("commit") == hotfix.get("commit"):
                row["hotfix"] = None
                note(row, hotfix, f"not applied: {problem}")

        update(self._path, change)
        self.common.log.error("promotion.hotfix_refused", commit=hotfix.get("commit"), why=problem)
        self._tell(f"hotfix {str(hotfix.get('commit'))[:12]} not applied", [problem, f"Asked by {by(hotfix)}."],
                   "hotfix")

    def _notice_hold(self, hold: dict[str, Any] | None) -> None:
        """Log and notify a hold given or released by the CLI since the last look (not on the first look)."""
        now = hold.get("at") if hold else None
        if self._hold_seen is ... or self._hold_seen == now:
            self._hold_seen = now
            return
        self._hold_seen = now
        if hold:
            self.common.log.warning("promotion.held", kind=hold.get("kind"), who=hold.get("who"),
                                    reason=hold.get("reason"))
            self._tell("promotion held", [f"Held by {by(hold)}.", "Nothing new is applied until `reconciler "
                                          "promote release` (drift is still healed)."], "hold")
        else:
            self.common.log.info("promotion.released")
            self._tell("promotion released", ["Promotion goes on: the next promoted commit is applied."], "hold")
