"""A PR carrying the YAML alias bomb gets an "over limits" comment; the daemon keeps reconciling main."""

from __future__ import annotations

import time

import pytest

from tests.daemon.conftest import DaemonBed
from tests.daemon.harness import git
from tests.daemon.test_daemon_testbed import add_partition, partitions
from tests.desired.hostile.cases import load_cases

pytestmark = pytest.mark.testbed


def test_alias_bomb_pr_is_over_limits_and_main_goes_on(dbed: DaemonBed, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.forge.fake_github import FakeGitHub

    token = "ghp_hostileTestToken0123456789"
    monkeypatch.setenv("RECONCILER_TEST_FORGE_TOKEN", token)
    [bomb] = [c for c in load_cases() if c.name == "34-alias-bomb"]
    assert bomb.raw is not None
    fake = FakeGitHub(token=token)
    work = dbed.remote.work
    with fake.running():
        daemon = dbed.daemon(forge={"type": "github", "url": fake.base_url, "repo": "acme/cluster",
                                    "token_env": "RECONCILER_TEST_FORGE_TOKEN", "interval": "1s",
                                    "plan_limits": {"cpu": "20s", "memory": "512M", "wall": "30s"}},
                              # PRs are planned on the facts of a no-op cycle: on a bare bed the first cycle
                              # configures the cluster, and the next (a drift check) gives the PR worker its facts
                              drift_interval="2s")
        try:
            daemon.wait_applied(dbed.remote.head())
            git(work, "checkout", "-q", "-B", "bomb", "main")
            (work / "bomb.yaml").write_text(bomb.raw)
            git(work, "add", "bomb.yaml")
            git(work, "commit", "-qm", "PR: an alias bomb")
            git(work, "push", "-q", "--force", "origin", "HEAD:refs/pull/13/head")
            sha = git(work, "rev-parse", "HEAD")
            git(work, "checkout", "-q", "main")
            started = time.monotonic()
            fake.add_pull(13, sha, head_ref="bomb")
            daemon.wait_for("over-limits comment", lambda: any(sha[:12] in c["body"] for c in fake.comments_on(13)),
                            timeout=60)
            print(f"\nalias-bomb PR commented {time.monotonic() - started:.1f} s after it was opened")
            [comment] = fake.comments_on(13)
            body = comment["body"]
            assert "**Verdict: over limits:" in body and "alias expansions" in body, body
            assert "bomb.yaml:4:" in body, body
            # The daemon goes on: a commit to main is applied while the PR stays open.
            head = dbed.remote.commit("partition hostile", add_partition("hostile"))  # type: ignore[arg-type]
            daemon.wait_applied(head)
            assert "hostile" in partitions(dbed)
        finally:
            daemon.stop()
