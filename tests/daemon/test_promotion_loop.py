"""The daemon's promotion gate without a testbed: production's reconcile loop on a real Git repository (two clusters,
promotion.yaml), asking a real HTTP listener that serves a staging store's /promotion.json; its decision journalled
in real SQLite and kept across a restart. (What is applied to nodes is in test_promotion_testbed.py.)"""

from __future__ import annotations

import threading
import time
import types
from pathlib import Path
from typing import Any

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.promotion_http import PROMOTION_KEY, note_applied
from reconciler.daemon.promotion_view import load, status_lines
from reconciler.daemon.store import Store
from tests.daemon.harness import GitRemote
from tests.daemon.promotion_bed import Staging
from tests.daemon.test_promotion_testbed import write_repo


def production(tmp_path: Path, remote: GitRemote, staging: Staging) -> Reconciler:
    config = DaemonConfig.model_validate({
        "repository": {"url": str(remote.bare)}, "mode": "enforce", "state_dir": str(tmp_path / "prod"),
        "cluster": "production", "promotion_sources": {"staging": f"http://127.0.0.1:{staging.port}"}})
    return Reconciler(config, Store(tmp_path / "prod" / "state.db"), Metrics(), threading.Event())


def promote(loop: Reconciler) -> Any:
    target, _ = loop.targets.resolve_git()
    assert target is not None
    return loop.promotion.gate(target)


def test_production_follows_stagings_verdict_through_the_loop(tmp_path: Path, staging: Staging) -> None:
    beds = {n: types.SimpleNamespace(state_dir=tmp_path / n, subnet=s)
            for n, s in (("staging", "10.251.7"), ("production", "10.251.8"))}
    (tmp_path / "git").mkdir()
    remote = GitRemote.create(tmp_path / "git", write_repo(tmp_path / "layout", beds))
    first = remote.head()
    loop = production(tmp_path, remote, staging)

    assert promote(loop) is None  # staging has applied nothing: nothing to reconcile, and it says why
    assert loop.store.get(PROMOTION_KEY)["reason"] == "not-applied-upstream"

    note_applied(staging.store, first, time.time() - 60)  # applied and clean for a minute: past the 8s soak
    target = promote(loop)
    assert target is not None and target.commit == first and target.loaded.cluster == "production"
    loop.apply.mark_applied(target)
    assert [e["commit"] for e in load(loop.store)["promoted"]] == [first]
    assert load(loop.store)["promoted"][0]["seconds"] >= 59

    change = remote.commit("shared prolog", {"bases/common/patches.yaml": lambda t: t.replace("exit 0", "true")})
    kept = promote(loop)
    assert kept is not None and kept.commit == first  # production keeps its applied commit
    assert loop.store.get(PROMOTION_KEY)["holding"] == change
    note_applied(staging.store, change, time.time())
    assert promote(loop).commit == first
    journal = loop.store.get(PROMOTION_KEY)
    assert journal["reason"] == "soaking" and 0 < journal["remaining"] <= 8.0

    bad = remote.commit("bad prolog", {"bases/common/patches.yaml": lambda t: t.replace("true", "exit 1")})
    staging.store.mark_rolled_back(bad, {"gate": "smoke-job", "message": "job 3 failed", "at": time.time()})
    assert promote(loop).commit == first
    journal = loop.store.get(PROMOTION_KEY)
    assert journal["holding"] == bad and journal["reason"] == "rolled-back-upstream"
    assert bad in journal["rejected"]

    staging.down()  # staging's daemon goes away: production waits and says since when
    assert promote(loop).commit == first
    down = loop.store.get(PROMOTION_KEY)
    assert down["reason"] == "upstream-unreachable" and down["unreachable_since"] and "refused" in down["error"]

    loop.store.close()  # production restarts: the hold and its start are still there
    again = production(tmp_path, remote, staging)
    assert again.store.get(PROMOTION_KEY) == down
    assert promote(again).commit == first
    after = again.store.get(PROMOTION_KEY)
    assert after["unreachable_since"] == down["unreachable_since"] and after["since"] == down["since"]
    assert any(f"holding {bad[:12]}" in line and "unreachable since" in line for line in status_lines(load(again.store)))
    staging.serve()  # back: still never the rolled-back commit (remembered), still the reason
    assert promote(again).commit == first
    assert again.store.get(PROMOTION_KEY)["reason"] == "rolled-back-upstream"
    again.store.close()


def test_a_commit_that_drops_the_rule_is_promoted_under_it(tmp_path: Path, staging: Staging) -> None:
    beds = {n: types.SimpleNamespace(state_dir=tmp_path / n, subnet=s)
            for n, s in (("staging", "10.251.7"), ("production", "10.251.8"))}
    (tmp_path / "git").mkdir()
    remote = GitRemote.create(tmp_path / "git", write_repo(tmp_path / "layout", beds))
    first = remote.head()
    note_applied(staging.store, first, time.time() - 60)
    loop = production(tmp_path, remote, staging)
    target = promote(loop)
    assert target is not None and target.commit == first
    loop.apply.mark_applied(target)
    (remote.work / "promotion.yaml").unlink()
    drop = remote.commit("no more promotion", {})
    kept = promote(loop)  # the applied commit's rule still holds for the commit that removes it
    assert kept is not None and kept.commit == first
    assert loop.store.get(PROMOTION_KEY)["holding"] == drop
    note_applied(staging.store, drop, time.time() - 60)
    assert promote(loop).commit == drop
    loop.apply.mark_applied(promote(loop))
    assert promote(loop).commit == drop
    assert loop.store.get(PROMOTION_KEY) is None  # from now on production follows its branch alone
    loop.store.close()
