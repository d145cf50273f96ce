"""The reconcile loop's pull-request side: when PR reports are due, renewing them, and noting a rollback on the
merged pull request of the commit rolled back."""

from __future__ import annotations

import time
from typing import Any

from reconciler.daemon.loop_core import LoopCore
from reconciler.daemon.store import Store
from reconciler.desired.loader import LoadedState
from reconciler.facts.models import ClusterFacts
from reconciler.model import parse_duration


class PrReports(LoopCore):
    """PR comments planned against the live cluster (forge config), and rollback notes on merged PRs."""

    def _prs_due(self, now: float) -> bool:
        forge = self.config.forge
        last = self.last_pr_report
        return bool(forge and self.source and (last is None or now - last >= parse_duration(forge.interval)))

    def report_prs(self, repo: Any, loaded: LoadedState, facts: ClusterFacts, store: Store, log: Any) -> None:
        """Plan every open pull request against these facts and keep one comment per PR current."""
        from reconciler.forge.config import TokenError, make_forge
        from reconciler.forge.pr_plan import report_pull_requests

        if self.config.forge is None or self.config.repository is None:
            return
        self.last_pr_report = time.monotonic()
        if self.forge is None:
            try:
                self.forge = make_forge(self.config.forge)
            except (TokenError, ValueError) as exc:
                log.error("prs.forge_unavailable", error=str(exc))
                return
        results = report_pull_requests(repo, self.config.repository.subdir, self.forge, facts,
                                       loaded, store.conn, self._checks_status(store), log,
                                       limits=self.config.forge.plan_limits.limits(), cluster=self.config.cluster)
        if results:
            log.info("prs.done", **{status: sum(r.status == status for r in results)
                                    for status in {r.status for r in results}})

    def _checks_status(self, store: Store) -> list[str]:
        """One line per failing health check, for PR comments."""
        try:
            from reconciler.checks import store as check_store
        except ImportError:
            return []
        return [f"{r.check} on {r.node}: {r.message}" for r in check_store.latest(store.conn) if not r.ok]

    def _note_rollback_on_pr(self, commit: str, record: dict[str, Any]) -> None:
        """Say on the merged pull request of COMMIT (named by its merge message) that it was rolled back."""
        from reconciler.forge.config import make_forge
        from reconciler.forge.rolled_back import note_rolled_back

        if self.config.forge is None or self.source is None:
            return
        try:
            if self.forge is None:
                self.forge = make_forge(self.config.forge)
            message = str(self.source.repo.commit(commit).message)
            done = note_rolled_back(self.forge, message, commit, record)
            if done is not None:
                self.log.info("prs.rolled_back_noted", commit=commit[:12], action=done.action)
        except Exception as exc:  # noqa: BLE001 - a forge outage or a bad token must not stop anything
            self.log.warning("prs.rolled_back_note_failed", commit=commit[:12], error=f"{type(exc).__name__}: {exc}")
