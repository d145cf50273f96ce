"""The reconcile loop's pull-request side: when PR reports are due, renewing them, and noting a rollback on the
merged pull request of the commit rolled back."""

from __future__ import annotations

import time
from typing import Any

from reconciler.daemon.git_source import GitSource
from reconciler.daemon.loop_core import Common
from reconciler.daemon.store import Store
from reconciler.desired.loader import LoadedState
from reconciler.facts.models import ClusterFacts
from reconciler.model import parse_duration


class PrReports:
    """PR comments planned against the live cluster (forge config), and rollback notes on merged PRs."""

    def __init__(self, common: Common, source: GitSource | None) -> None:
        self.common, self.source = common, source
        self.forge: Any = None
        self.last_report: float | None = None  # time.monotonic()

    def due(self, now: float) -> bool:
        """Whether a --once cycle reports now (forge and Git source configured, forge.interval passed)."""
        forge = self.common.config.forge
        last = self.last_report
        return bool(forge and self.source and (last is None or now - last >= parse_duration(forge.interval)))

    def report(self, repo: Any, loaded: LoadedState, facts: ClusterFacts, store: Store, log: Any) -> None:
        """Plan every open pull request against these facts and keep one comment per PR current."""
        from reconciler.forge.config import TokenError, make_forge
        from reconciler.forge.pr_plan import report_pull_requests

        config = self.common.config
        if config.forge is None or config.repository is None:
            return
        self.last_report = time.monotonic()
        if self.forge is None:
            try:
                self.forge = make_forge(config.forge)
            except (TokenError, ValueError) as exc:
                log.error("prs.forge_unavailable", error=str(exc))
                return
        results = report_pull_requests(repo, config.repository.subdir, self.forge, facts,
                                       loaded, store.conn, self._checks_status(store), log,
                                       limits=config.forge.plan_limits.limits(), cluster=config.cluster,
                                       promotion=self._promotion(loaded, store, log))
        if results:
            log.info("prs.done", **{status: sum(r.status == status for r in results)
                                    for status in {r.status for r in results}})

    def _promotion(self, loaded: LoadedState, store: Store, log: Any) -> list[str]:
        """This cluster's promotion state for its PR sections (nothing for a daemon without `cluster:`)."""
        from reconciler.daemon import promotion_view
        from reconciler.desired.errors import DesiredStateError
        from reconciler.desired.promotion import read_promotion

        cluster = self.common.config.cluster
        if cluster is None:
            return []
        try:
            rule = read_promotion(loaded.root).get(cluster)
        except (DesiredStateError, OSError) as exc:
            log.warning("prs.promotion_unreadable", error=str(exc)[:300])
            rule = None
        return promotion_view.pr_lines(promotion_view.load(store), rule)

    def _checks_status(self, store: Store) -> list[str]:
        """One line per failing health check, for PR comments."""
        try:
            from reconciler.checks import store as check_store
        except ImportError:
            return []
        return [f"{r.check} on {r.node}: {r.message}" for r in check_store.latest(store.conn) if not r.ok]

    def note_rollback(self, commit: str, record: dict[str, Any]) -> None:
        """Say on the merged pull request of COMMIT (named by its merge message) that it was rolled back."""
        from reconciler.forge.config import make_forge
        from reconciler.forge.rolled_back import note_rolled_back

        if self.common.config.forge is None or self.source is None:
            return
        try:
            if self.forge is None:
                self.forge = make_forge(self.common.config.forge)
            message = str(self.source.repo.commit(commit).message)
            done = note_rolled_back(self.forge, message, commit, record)
            if done is not None:
                self.common.log.info("prs.rolled_back_noted", commit=commit[:12], action=done.action)
        except Exception as exc:  # noqa: BLE001 - a forge outage or a bad token must not stop anything
            self.common.log.warning("prs.rolled_back_note_failed", commit=commit[:12],
                                    error=f"{type(exc).__name__}: {exc}")
