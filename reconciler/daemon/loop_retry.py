"""`reconciler upgrade retry NODE` after the rollout ended: a failed node, left drained for a human, goes through
the upgrade machine again once the human fixed it (issue 46 item 4).

While a rollout is in flight the machine takes a retry itself (rollout/operator.py). Once it ended, nothing else
would run the machine for the node: its commit is applied and its plan may have nothing left (the package went in
before a gate failed). So at a cycle with no rollout in flight the daemon turns the standing retries of nodes that
failed in the last rollout into a rollout of their own: one wave (`retry`, no wave gates) of those nodes, for the
applied commit, with each node journalled as it ended (`failed`, its reason), which the runner then finishes as it
finishes a rollout a killed daemon left (`Applying.recover`): the machine acts on the retry (failed ->
upgrade-required), drains (the drain is its own: the failed reason keeps the `reconciler: upgrade` prefix),
applies what is still held, reboots if needed, runs the gates and resumes. The journal is saved first, so a daemon
killed during the retry finishes it at its next start like any rollout.
"""

from __future__ import annotations

import time
from typing import Any

from reconciler.daemon.operator import KEY, load
from reconciler.daemon.upgrade_view import failed_last
from reconciler.rollout.journal import NodeEntry, Phase, RolloutJournal, UpgradeRecord
from reconciler.rollout.journal import UpgradeState as S
from reconciler.rollout.waves import Wave, WavePlan


def retry_journal(store: Any, applied: str | None) -> RolloutJournal | None:
    """A rollout journal retrying the nodes the operator asked to retry that failed in the last rollout, for the
    APPLIED commit; None when there is none to retry."""
    asked = load(store.get(KEY)).retry
    if not asked or not applied:
        return None
    failed = failed_last(next(iter(store.rollouts(1)), None))
    nodes = sorted(n for n in asked if n in failed)
    if not nodes:
        return None
    wave = Wave(1, "retry", nodes, gated=False, why="`reconciler upgrade retry` after the rollout ended")
    now = time.time()
    upgrade = UpgradeRecord(nodes={n: NodeEntry(state=S.FAILED, since=now, reason=failed[n]) for n in nodes},
                            failed=list(nodes))
    return RolloutJournal(commit=applied, waves=WavePlan([wave], mode="retry").as_dict(), phase=Phase.APPLYING,
                          started=now, upgrade=upgrade)
