"""Promotion after several clusters (`after: [a, b]`, `require: all | any`): the decision from recorded answers,
promotion.yaml's checks at file:line, and production's real loop asking two real listeners (two staging stores)."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.promotion import decide, local, parse_upstream
from reconciler.daemon.promotion_http import PROMOTION_KEY, note_applied
from reconciler.daemon.store import Store
from reconciler.desired.errors import DesiredStateError
from reconciler.desired.promotion import read_promotion
from tests.daemon.harness import GitRemote
from tests.daemon.promotion_bed import Staging
from tests.daemon.test_promotion_loop import promote
from tests.daemon.test_promotion_testbed import write_repo
from tests.desired.cluster_repo import two_cluster_repo

A, B, C = ("a" * 40, "b" * 40, "c" * 40)  # production's branch: C (head) <- B <- A (applied)
LINEAGE = [C, B, A]


def answer(name: str, applied: dict[str, float], now: float = 10_000.0, **extra: Any) -> Any:
    """An earlier cluster's /promotion.json: COMMIT -> applied_at, clean since then, the last one current."""
    order = sorted(applied, key=lambda c: applied[c])
    records = {c: {"applied_at": t, "until": applied[order[i + 1]] if i + 1 < len(order) else None,
                   "clean_since": t} for i, (c, t) in enumerate((c, applied[c]) for c in order)}
    return parse_upstream({"cluster": name, "now": now, "applied_commit": order[-1] if order else None,
                           "applied": records, "rolled_back": {}, "failing": [], **extra})


def test_all_needs_every_earlier_cluster_any_needs_one() -> None:
    soaked, fresh = answer("east", {A: 0, C: 9_000}), answer("west", {A: 0, C: 9_990})
    both = {"east": soaked, "west": fresh}
    held = decide(C, A, LINEAGE, both, 600, after="east and west")
    assert held.apply is None and held.holding == C and held.reason == "soaking"
    assert held.message.startswith("needs all of east, west: soaking on west: 590s of 600s left")
    assert decide(C, A, LINEAGE, both, 600, after="east or west", require="any").apply == C
    # one earlier daemon down: `all` waits, `any` goes on with the other's verdict
    down = {"east": soaked, "west": None}
    waiting = decide(C, A, LINEAGE, down, 600, after="east and west", unreachable={"west": "refused"})
    assert waiting.reason == "upstream-unreachable" and waiting.message.startswith("west's daemon did not answer")
    assert decide(C, A, LINEAGE, down, 600, after="east or west", unreachable={"west": "refused"},
                  require="any").apply == C
    # a rollback by either is final, even when the other promotes it
    rolled = answer("west", {A: 0}, rolled_back={C: {"gate": "smoke-job", "message": "job 3 failed"}})
    refused = decide(C, A, LINEAGE, {"east": soaked, "west": rolled}, 600, after="east or west", require="any")
    assert refused.apply is None and refused.reason == "rolled-back-upstream" and "west rolled it back" in \
        refused.message


def test_times_move_onto_this_clock() -> None:
    upstream = answer("east", {A: 100.0, C: 200.0}, now=300.0)
    moved = local(upstream, 1_000.0)
    assert moved.now == 1_300.0 and moved.applied[C].applied_at == 1_200.0 and moved.applied[A].until == 1_200.0


@pytest.mark.parametrize(("text", "where", "message"), [
    ("promotion:\n  b: {after: [a, x]}\n", "promotion.yaml:2:18", "after: no cluster 'x' in this repository"),
    ("promotion:\n  b: {after: [a, a]}\n", "promotion.yaml:2:18", "after: a is named twice"),
    ("promotion:\n  b: {after: [a, b]}\n", "promotion.yaml:2:18", "a cluster cannot come after itself"),
    ("promotion:\n  a: {after: [b]}\n  b: {after: [a]}\n", "promotion.yaml:2:7", "promotion cycle: a -> b -> a"),
    ("promotion:\n  b: {after: [a], require: most}\n", "promotion.yaml:2:19", "'all' or 'any'"),
    ("promotion:\n  b: {after: []}\n", "promotion.yaml:2:7", "after: names no cluster"),
])
def test_several_afters_are_checked_at_their_line(tmp_path: Path, text: str, where: str, message: str) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "promotion.yaml").write_text(text)
    with pytest.raises(DesiredStateError) as caught:
        read_promotion(root)
    shown = str(caught.value)
    assert where in shown and message in shown, shown


@pytest.fixture
def stagings(tmp_path: Path) -> Iterator[dict[str, Staging]]:
    ups = {name: Staging(tmp_path / f"{name}.db", name) for name in ("staging", "canary")}
    for up in ups.values():
        up.serve()
    yield ups
    for up in ups.values():
        up.down()
        up.store.close()


def test_production_after_two_clusters_through_its_loop(tmp_path: Path, stagings: dict[str, Staging]) -> None:
    beds = {n: types.SimpleNamespace(state_dir=tmp_path / n, subnet=s)
            for n, s in (("staging", "10.251.7"), ("canary", "10.251.9"), ("production", "10.251.8"))}
    layout = write_repo(tmp_path / "layout", beds)
    (layout / "promotion.yaml").write_text("promotion:\n  production: {after: [staging, canary], soak: 8s}\n")
    (tmp_path / "git").mkdir()
    remote = GitRemote.create(tmp_path / "git", layout)
    first = remote.head()
    config = DaemonConfig.model_validate({
        "repository": {"url": str(remote.bare)}, "mode": "enforce", "state_dir": str(tmp_path / "prod"),
        "cluster": "production", "promotion_sources": {n: f"http://127.0.0.1:{s.port}" for n, s in stagings.items()}})
    loop = Reconciler(config, Store(tmp_path / "prod" / "state.db"), Metrics(), threading.Event())
    note_applied(stagings["staging"].store, first, time.time() - 60)
    assert promote(loop) is None  # staging passed it; canary has not applied it
    journal = loop.store.get(PROMOTION_KEY)
    assert journal["after"] == "staging and canary" and journal["reason"] == "not-applied-upstream"
    assert "needs all of staging, canary: waiting for canary to apply it" in journal["message"]
    note_applied(stagings["canary"].store, first, time.time() - 30)
    target = promote(loop)
    assert target is not None and target.commit == first
    loop.apply.mark_applied(target)
    stagings["canary"].down()
    change = remote.commit("shared prolog", {"bases/common/patches.yaml": lambda t: t + "# change\n"})
    note_applied(stagings["staging"].store, change, time.time() - 60)
    assert promote(loop).commit == first
    assert loop.store.get(PROMOTION_KEY)["reason"] == "upstream-unreachable"
    assert "canary: " in loop.store.get(PROMOTION_KEY)["error"]
    loop.store.close()
