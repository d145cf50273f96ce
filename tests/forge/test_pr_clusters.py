"""PR comments in a multi-cluster repository: a section per touched cluster, each written by its own daemon.

Two "daemons" are two report_pull_requests calls with different clusters against the same stand-in forge and
the same real Git origin; the stand-in's hooks make one daemon write while the other is between its read and its
write. Every test runs against each forge flavour (stands.py): GitHub, Gitea and GitLab.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from reconciler.desired.clusters import load_cluster
from reconciler.desired.loader import LoadedState
from reconciler.engine.report import MARKER
from reconciler.forge.base import Forge
from reconciler.forge.pr_plan import PrReportResult, report_pull_requests
from reconciler.forge.pr_sections import parse_sections
from reconciler.forge.pr_shared_comment import SUPERSEDED
from tests.engine.testbed_state import write_state
from tests.forge.conftest import TOKEN, Origin, Sleeps, converged_facts
from tests.forge.stands import KINDS, Stand, running_stand

FLEET = "fleet"
BASE = f"{FLEET}/bases/common/cluster.yaml"
PROD = f"{FLEET}/clusters/prod/cluster.yaml"
BASE_CHANGE = (BASE, 'MaxTime: "04:00:00"', 'MaxTime: "05:00:00"')
PROD_OVERRIDE = (PROD, "  name: prod\n", '  name: prod\n  partitions:\n    - name: batch\n      MaxTime: "08:00:00"\n')
FAILED = "nccl nightly: FAILED on gpu02"


@pytest.fixture(params=KINDS)
def stand(request: pytest.FixtureRequest, sleeps: Sleeps) -> Iterator[Stand]:
    """Each forge flavour in turn: its stand-in server running, our client for it."""
    with running_stand(request.param, TOKEN, sleeps) as running:
        yield running


@pytest.fixture
def forge(stand: Stand) -> Forge:
    """The flavour's client (what the daemons write through)."""
    return stand.forge


@pytest.fixture
def fleet(tmp_path: Path) -> Origin:
    """An origin whose main holds a two-cluster repository under fleet/: one shared base, prod and staging."""
    origin = Origin(tmp_path)
    write_state(origin.work / FLEET / "bases" / "common", name="fleet", state_dir=origin.state_dir,
                subnet="10.250.8", computes="gpu[01-02]")
    for name in ("prod", "staging"):
        origin.write(f"{FLEET}/clusters/{name}/overlay.yaml", "bases: [common]\n")
        origin.write(f"{FLEET}/clusters/{name}/cluster.yaml", f"cluster:\n  name: {name}\n")
    origin.commit("two clusters")
    origin.push_main()
    return origin


def base_of(origin: Origin, cluster: str) -> LoadedState:
    """CLUSTER's main-branch desired state, as its daemon loads it."""
    repo = origin.daemon
    return load_cluster(Path(repo.working_dir) / FLEET, cluster, commit=repo.head.commit.hexsha)


def daemon(origin: Origin, forge: Forge, cluster: str, checks: list[str] | None = None,
           conn: sqlite3.Connection | None = None) -> list[PrReportResult]:
    """One cycle of CLUSTER's daemon: its own facts (converged on main), its own cluster."""
    base = base_of(origin, cluster)
    return report_pull_requests(origin.daemon, FLEET, forge, converged_facts(base), base, conn, checks or [],
                                structlog.get_logger(), cluster=cluster)


def open_pr(origin: Origin, stand: Stand, number: int, *edits: tuple[str, str, str]) -> str:
    """Commit EDITS on a branch off main, push it as PR NUMBER; return the head sha."""
    origin.branch(f"pr-{number}")
    for rel, old, new in edits:
        origin.edit(rel, old, new)
    sha = origin.commit(f"PR {number}")
    origin.push_pr(number, sha, stand.forge.pr_ref(number))
    stand.open(number, sha, head_ref=f"pr-{number}")
    return sha


def body_of(stand: Stand, number: int) -> str:
    """The one comment of ours on the PR."""
    ours = [c["body"] for c in stand.comments_on(number) if c["body"].startswith(MARKER)]
    assert len(ours) == 1, ours
    return str(ours[0])


def test_base_change_gets_a_section_per_cluster(fleet: Origin, stand: Stand, forge: Forge) -> None:
    sha = open_pr(fleet, stand, 1, BASE_CHANGE)
    [staging] = daemon(fleet, forge, "staging")
    assert (staging.status, staging.head_sha, staging.verdict) == ("created", sha, "3 change(s) on 3 node(s)")
    body = body_of(stand, 1)
    assert "**Clusters this change touches**: `prod`, `staging`" in body
    assert "**Clusters this change does not touch**: none" in body
    sections = parse_sections(body)
    assert sorted(sections) == ["prod", "staging"]
    assert "_waiting for prod's daemon_" in sections["prod"].text and sections["prod"].head is None
    assert "+PartitionName=batch Nodes=gpu[01-02] MaxTime=05:00:00" in sections["staging"].text
    assert "**Verdict: 3 change(s) on 3 node(s)**" in sections["staging"].text

    [prod] = daemon(fleet, forge, "prod")
    assert prod.status == "edited" and prod.comment_id == staging.comment_id
    body = body_of(stand, 1)
    sections = parse_sections(body)
    assert "waiting" not in body
    assert body.index("### Cluster `prod`") < body.index("### Cluster `staging`")
    for name in ("prod", "staging"):
        assert sections[name].head == sha
        assert "+PartitionName=batch Nodes=gpu[01-02] MaxTime=05:00:00" in sections[name].text
    assert len(stand.comments_on(1)) == 1 and stand.creates() == 1


def test_override_in_one_cluster_touches_only_it(fleet: Origin, stand: Stand, forge: Forge) -> None:
    open_pr(fleet, stand, 2, PROD_OVERRIDE)
    conn = sqlite3.connect(":memory:")
    [staging] = daemon(fleet, forge, "staging", conn=conn)
    assert staging.status == "created" and staging.verdict.startswith("not touched")
    body = body_of(stand, 2)
    assert "**Clusters this change touches**: `prod`" in body
    assert "**Clusters this change does not touch**: `staging` (their desired state is the same" in body
    assert list(parse_sections(body)) == ["prod"] and "_waiting for prod's daemon_" in body

    [prod] = daemon(fleet, forge, "prod")
    assert prod.status == "edited" and prod.verdict == "3 change(s) on 3 node(s)"
    body = body_of(stand, 2)
    assert list(parse_sections(body)) == ["prod"]
    assert "+PartitionName=batch Nodes=gpu[01-02] MaxTime=08:00:00" in body
    assert "### Cluster `staging`" not in body and "waiting" not in body
    # staging's next cycle: nothing changed, and the comment still says staging is not touched
    before = stand.edits()
    assert [r.status for r in daemon(fleet, forge, "staging", conn=conn)] == ["skipped"]
    assert stand.edits() == before


def test_a_write_between_read_and_reread_is_kept(fleet: Origin, stand: Stand, forge: Forge) -> None:
    open_pr(fleet, stand, 3, BASE_CHANGE)
    daemon(fleet, forge, "staging")
    # prod's daemon reads the comment; before it re-reads it to compare, staging's daemon writes a new section
    stand.before_read(3, lambda: daemon(fleet, forge, "staging", checks=[FAILED]), nth=2)
    gets = stand.reads(3)
    [prod] = daemon(fleet, forge, "prod")
    assert not stand.hooks_left  # the hook ran
    assert prod.status == "edited"
    sections = parse_sections(body_of(stand, 3))
    assert FAILED in sections["staging"].text  # staging's write survived prod's
    assert "**Verdict: 3 change(s) on 3 node(s)**" in sections["prod"].text
    # prod read, re-read (changed), then read and re-read again: 4 of its own, 2 of staging's
    assert stand.reads(3) - gets == 6


def test_a_section_erased_in_the_write_window_is_written_again(fleet: Origin, stand: Stand,
                                                                forge: Forge) -> None:
    open_pr(fleet, stand, 4, BASE_CHANGE)
    [first] = daemon(fleet, forge, "staging")
    # after prod's daemon re-read the comment and just before its PATCH lands, staging's daemon writes: no
    # forge has a conditional write for comments, so prod's PATCH puts staging's older section back
    assert first.comment_id is not None
    stand.before_edit(first.comment_id, lambda: daemon(fleet, forge, "staging", checks=[FAILED]))
    daemon(fleet, forge, "prod")
    assert not stand.hooks_left
    assert FAILED not in body_of(stand, 4)
    # staging's next cycle: same head and facts, but its section is not what it wrote: planned and written again
    [again] = daemon(fleet, forge, "staging", checks=[FAILED])
    assert again.status == "edited"
    sections = parse_sections(body_of(stand, 4))
    assert FAILED in sections["staging"].text and "**Verdict: 3 change(s)" in sections["prod"].text
    assert [r.status for r in daemon(fleet, forge, "staging", checks=[FAILED])] == ["skipped"]


def test_two_daemons_creating_at_once_end_in_one_comment(fleet: Origin, stand: Stand,
                                                         forge: Forge) -> None:
    open_pr(fleet, stand, 5, BASE_CHANGE)
    # staging's daemon found no comment; before its POST lands, prod's daemon creates one
    stand.before_create(5, lambda: daemon(fleet, forge, "prod"))
    [staging] = daemon(fleet, forge, "staging")
    assert not stand.hooks_left
    first, second = stand.comments_on(5)
    assert staging.comment_id == first["id"] and second["body"] == SUPERSEDED
    sections = parse_sections(body_of(stand, 5))
    assert all(sections[n].head is not None and "**Verdict: 3 change(s)" in sections[n].text
               for n in ("prod", "staging"))


def test_the_daemon_passes_its_cluster(fleet: Origin, stand: Stand, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's `cluster:` reaches report_pull_requests: a real Reconciler writes only its own section."""
    from reconciler.daemon.config import DaemonConfig
    from reconciler.daemon.loop import Reconciler
    from reconciler.daemon.metrics import Metrics
    from reconciler.daemon.store import Store

    open_pr(fleet, stand, 6, BASE_CHANGE)
    monkeypatch.setenv("RECONCILER_TEST_FORGE_TOKEN", TOKEN)
    config = DaemonConfig.model_validate({
        "repository": {"url": str(fleet.bare), "subdir": FLEET}, "mode": "enforce", "metrics_listen": None,
        "state_dir": str(tmp_path / "prod-daemon"), "cluster": "prod",
        "forge": {"type": stand.kind, "url": stand.url, "repo": stand.repo,
                  "token_env": "RECONCILER_TEST_FORGE_TOKEN"}})
    config.state_path.mkdir(parents=True)
    loop = Reconciler(config, Store(config.state_path / "state.db"), Metrics(), threading.Event())
    base = base_of(fleet, "prod")
    loop.prs.report(fleet.daemon, base, converged_facts(base), loop.store, structlog.get_logger())
    sections = parse_sections(body_of(stand, 6))
    assert sections["prod"].head is not None and "**Verdict: 3 change(s)" in sections["prod"].text
    assert sections["staging"].head is None and "_waiting for staging's daemon_" in sections["staging"].text
