"""The forge clients against the fake GitHub server: pagination, rate limits, 5xx, 422, tokens."""

from __future__ import annotations

import email.utils
import logging
import time
from pathlib import Path

import pytest
import structlog

from reconciler.engine.report import MARKER
from reconciler.forge import ForgeConfig, ForgeError, PullRequest, Secret, TokenError, load_token, make_forge
from reconciler.forge.gitea import GiteaForge
from reconciler.forge.github import GitHubForge
from reconciler.forge.gitlab import GitLabForge
from reconciler.forge.http import rate_limit_wait
from tests.forge.conftest import TOKEN, Sleeps
from tests.forge.fake_github import FakeGitHub


def _pr(fake: FakeGitHub, number: int = 1) -> PullRequest:
    fake.add_pull(number, f"{number:040x}")
    return PullRequest(number, f"{number:040x}", f"pr-{number}", "t")


def test_pyGithub_uses_the_enterprise_prefix_and_our_token(fake: FakeGitHub, forge: GitHubForge) -> None:
    _pr(fake)
    assert [p.number for p in forge.open_pull_requests()] == [1]
    assert [r.path for r in fake.requests] == ["/api/v3/repos/acme/cluster", "/api/v3/repos/acme/cluster/pulls"]
    assert all(r.status == 200 for r in fake.requests)


def test_open_pull_requests_follows_link_pages(fake: FakeGitHub, forge: GitHubForge) -> None:
    for n in range(1, 36):
        fake.add_pull(n, f"{n:040x}", head_ref=f"branch-{n}")
    prs = forge.open_pull_requests()
    assert sorted(p.number for p in prs) == list(range(1, 36))
    assert {p.head_sha for p in prs} == {f"{n:040x}" for n in range(1, 36)}
    pages = [r.query.get("page", ["1"])[0] for r in fake.requests if r.path.endswith("/pulls")]
    assert pages == ["1", "2"]  # 30 + 5 with GitHub's default per_page


def test_closed_pull_requests_are_not_listed(fake: FakeGitHub, forge: GitHubForge) -> None:
    _pr(fake, 1)
    _pr(fake, 2)
    fake.pulls[2]["state"] = "closed"
    assert [p.number for p in forge.open_pull_requests()] == [1]


def test_find_comment_on_a_later_page_and_edit_it_in_place(fake: FakeGitHub, forge: GitHubForge) -> None:
    pr = _pr(fake)
    for i in range(45):
        fake.add_comment(1, f"review comment {i} mentioning {MARKER} in the middle")
    ours = fake.add_comment(1, f"{MARKER}\nold plan", login=fake.login)
    for i in range(20):
        fake.add_comment(1, f"later comment {i}")
    found = forge.find_comment(pr)
    assert found is not None and found.id == ours  # the others only mention the marker, not start with it
    pages = [r.query.get("page", ["1"])[0] for r in fake.requests if r.path.endswith("/issues/1/comments")]
    assert pages == ["1", "2", "3"]  # 66 comments, 30 a page
    result = forge.upsert_comment(pr, f"{MARKER}\nnew plan")
    assert result.action == "edited" and result.comment.id == ours
    assert fake.comments[ours]["body"].endswith("new plan")
    assert len(fake.comments_on(1)) == 66 and fake.count("POST") == 0
    assert forge.upsert_comment(pr, f"{MARKER}\nnew plan").action == "unchanged"
    assert fake.count("PATCH") == 1


def test_primary_rate_limit_403_is_waited_until_reset_and_retried(fake: FakeGitHub, forge: GitHubForge,
                                                                  sleeps: Sleeps) -> None:
    _pr(fake)
    fake.inject_primary_rate_limit(times=2, reset_in=4)
    assert [p.number for p in forge.open_pull_requests()] == [1]
    statuses = [r.status for r in fake.requests]
    assert statuses == [403, 403, 200, 200]
    assert len(sleeps) == 2 and all(3.0 <= s <= 5.5 for s in sleeps), sleeps  # reset - now + 1


def test_secondary_rate_limit_429_waits_retry_after(fake: FakeGitHub, forge: GitHubForge, sleeps: Sleeps) -> None:
    pr = _pr(fake)
    fake.inject_secondary_rate_limit(times=1, retry_after=7)
    fake.inject_secondary_rate_limit(times=1, retry_after=2, status=403)
    assert forge.upsert_comment(pr, f"{MARKER}\nplan").action == "created"
    assert sleeps[:2] == [7.0, 2.0]
    assert len(fake.comments_on(1)) == 1


def test_rate_limit_on_a_post_is_retried_too(fake: FakeGitHub, forge: GitHubForge, sleeps: Sleeps) -> None:
    pr = _pr(fake)
    fake.inject_secondary_rate_limit(times=1, retry_after=1)
    fake.faults[-1].methods = frozenset({"POST"})
    assert forge.upsert_comment(pr, f"{MARKER}\nplan").action == "created"
    assert [r.status for r in fake.requests if r.method == "POST"] == [429, 201]
    assert len(fake.comments_on(1)) == 1 and sleeps == [1.0]


def test_rate_limit_resetting_too_late_is_an_error_not_a_long_sleep(fake: FakeGitHub, sleeps: Sleeps) -> None:
    forge = GitHubForge(fake.base_url, "acme/cluster", Secret(TOKEN), throttle=False, sleep=sleeps,
                        max_rate_limit_wait=30)
    fake.inject_primary_rate_limit(times=1, reset_in=3600)
    with pytest.raises(ForgeError) as caught:
        forge.open_pull_requests()
    assert caught.value.rate_limited and caught.value.status == 403 and caught.value.transient
    assert sleeps == []


def test_server_errors_are_retried_with_backoff(fake: FakeGitHub, forge: GitHubForge, sleeps: Sleeps) -> None:
    _pr(fake)
    fake.inject(502, times=3)
    assert [p.number for p in forge.open_pull_requests()] == [1]
    assert [r.status for r in fake.requests] == [502, 502, 502, 200, 200]
    assert sleeps == sorted(sleeps) and sleeps[-1] > sleeps[0] > 0  # exponential


def test_server_errors_that_persist_raise_a_forge_error(fake: FakeGitHub, forge: GitHubForge,
                                                        sleeps: Sleeps) -> None:
    fake.inject(503, times=50)
    with pytest.raises(ForgeError) as caught:
        forge.open_pull_requests()
    assert caught.value.status == 503 and caught.value.transient
    assert fake.count("GET") == 7 and len(fake.faults) == 43  # bounded: the first try and 6 retries
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]  # the first retry is immediate, then exponential


def test_post_answered_502_after_it_was_stored_does_not_duplicate(fake: FakeGitHub, forge: GitHubForge,
                                                                  sleeps: Sleeps) -> None:
    pr = _pr(fake)
    fake.inject(502, times=1, methods={"POST"}, after=True)  # stored, then a proxy answers 502
    result = forge.upsert_comment(pr, f"{MARKER}\nplan")
    assert result.action == "unchanged"  # found on the second look, not posted again
    assert len(fake.comments_on(1)) == 1 and fake.count("POST") == 1


def test_post_failing_with_502_is_posted_again_once(fake: FakeGitHub, forge: GitHubForge) -> None:
    pr = _pr(fake)
    fake.inject(502, times=1, methods={"POST"})
    assert forge.upsert_comment(pr, f"{MARKER}\nplan").action == "created"
    assert len(fake.comments_on(1)) == 1 and fake.count("POST") == 2


def test_body_over_65536_characters_is_rejected_with_422(fake: FakeGitHub, forge: GitHubForge) -> None:
    pr = _pr(fake)
    with pytest.raises(ForgeError) as caught:
        forge.create_comment(pr, "x" * 65_537)
    assert caught.value.status == 422 and "too long" in str(caught.value)
    assert forge.create_comment(pr, "x" * 65_536).id > 0  # the limit itself is accepted
    with pytest.raises(ValueError):  # upsert refuses before sending
        forge.upsert_comment(pr, MARKER + "x" * 65_536)


def test_bad_token_is_401_and_never_in_the_error(fake: FakeGitHub, sleeps: Sleeps) -> None:
    wrong = "ghp_WRONGtoken_0123456789"
    forge = GitHubForge(fake.base_url, "acme/cluster", Secret(wrong), throttle=False, sleep=sleeps)
    with pytest.raises(ForgeError) as caught:
        forge.open_pull_requests()
    assert caught.value.status == 401 and "Bad credentials" in str(caught.value)
    assert wrong not in str(caught.value) and wrong not in repr(caught.value)
    assert sleeps == []  # 401 is not retried


def test_token_never_logged_by_the_client(fake: FakeGitHub, forge: GitHubForge,
                                          caplog: pytest.LogCaptureFixture) -> None:
    pr = _pr(fake)
    caplog.set_level(logging.DEBUG)  # PyGithub and urllib3 log every request at DEBUG
    fake.inject_primary_rate_limit(times=1, reset_in=1)
    fake.inject(500, times=1)
    with structlog.testing.capture_logs() as logs:
        forge.upsert_comment(pr, f"{MARKER}\nplan")
        forge.upsert_comment(pr, f"{MARKER}\nplan 2")
    text = caplog.text + repr(logs) + repr(forge.__dict__)
    assert "GET /api/v3/repos/acme/cluster" in caplog.text or "/api/v3/repos/acme/cluster" in caplog.text
    assert TOKEN not in text and TOKEN not in repr(forge)


def test_gitea_client_against_the_gitea_flavour(sleeps: Sleeps) -> None:
    fake = FakeGitHub(token=TOKEN, prefix="/api/v1")
    with fake.running():
        for n in range(1, 13):
            fake.add_pull(n, f"{n:040x}")
        forge = GiteaForge(fake.root, "acme/cluster", Secret(TOKEN), per_page=5, sleep=sleeps)
        assert forge.url == fake.base_url and forge.pr_ref(3) == "refs/pull/3/head"
        fake.inject_primary_rate_limit(times=1, reset_in=2)
        prs = forge.open_pull_requests()
        assert sorted(p.number for p in prs) == list(range(1, 13))
        assert [r.query.get("page") for r in fake.requests if r.status == 200] == [["1"], ["2"], ["3"]]
        assert len(sleeps) == 1
        pr = next(p for p in prs if p.number == 4)
        assert forge.upsert_comment(pr, f"{MARKER}\none").action == "created"
        assert forge.upsert_comment(pr, f"{MARKER}\ntwo").action == "edited"
        assert [c["body"] for c in fake.comments_on(4)] == [f"{MARKER}\ntwo"]
        with pytest.raises(ForgeError) as caught:
            forge.create_comment(pr, "y" * 70_000)
        assert caught.value.status == 422 and TOKEN not in str(caught.value)


def test_rate_limit_wait_reads_github_and_gitlab_headers() -> None:
    now = 1_000_000.0
    assert rate_limit_wait(429, {"Retry-After": "12"}, now) == 12.0
    assert rate_limit_wait(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000010"}, now) == 11.0
    assert rate_limit_wait(429, {"RateLimit-Remaining": "0", "RateLimit-Reset": "1000005"}, now) == 6.0
    assert rate_limit_wait(403, {"Retry-After": email.utils.formatdate(now + 10, usegmt=True)}, now) == 10.0
    assert rate_limit_wait(403, {}, now) is None  # a permission error, not a rate limit
    assert rate_limit_wait(429, {}, now, secondary_wait=60) == 60
    assert rate_limit_wait(500, {"Retry-After": "1"}, now) is None


def test_tokens_from_env_or_file_and_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONCILER_TEST_TOKEN", "  tok-from-env \n")
    assert load_token(token_env="RECONCILER_TEST_TOKEN").reveal() == "tok-from-env"
    (tmp_path / "token").write_text("tok-from-file\nsecond line\n")
    secret = load_token(token_file=tmp_path / "token")
    assert secret.reveal() == "tok-from-file"
    assert "tok-from-file" not in repr(secret) + str(secret) + f"{secret}" + repr([secret])
    with pytest.raises(TokenError, match="RECONCILER_MISSING"):
        load_token(token_env="RECONCILER_MISSING")
    with pytest.raises(TokenError, match="cannot read"):
        load_token(token_file=tmp_path / "absent")
    with pytest.raises(ValueError, match="exactly one"):
        ForgeConfig(type="github", repo="a/b", token_env="X", token_file="/y")
    with pytest.raises(ValueError, match="needs url"):
        ForgeConfig(type="gitea", repo="a/b", token_env="X")


def test_make_forge_builds_each_kind(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok\n")
    github = make_forge(ForgeConfig(type="github", url="https://ghe.example/api/v3", repo="a/b",
                                    token_file=str(tmp_path / "token")))
    assert isinstance(github, GitHubForge) and github.ident == "github:https://ghe.example/api/v3/a/b"
    gitlab = make_forge(ForgeConfig(type="gitlab", repo="grp/sub/proj", token_file=str(tmp_path / "token")))
    assert isinstance(gitlab, GitLabForge) and gitlab.pr_ref(7) == "refs/merge-requests/7/head"
    assert gitlab.comment_limit > 65_536
    gitea = make_forge(ForgeConfig(type="gitea", url="https://git.example", repo="a/b",
                                   token_file=str(tmp_path / "token")))
    assert isinstance(gitea, GiteaForge) and gitea.url == "https://git.example/api/v1"


def test_upsert_takes_under_a_second_without_pacing(fake: FakeGitHub, forge: GitHubForge) -> None:
    pr = _pr(fake)
    start = time.monotonic()
    for i in range(5):
        forge.upsert_comment(pr, f"{MARKER}\nplan {i}")
    assert time.monotonic() - start < 3
    assert len(fake.comments_on(1)) == 1


def test_gitlab_client_merge_requests_and_notes(sleeps: Sleeps) -> None:
    from tests.forge.fake_gitlab import FakeGitLab

    fake = FakeGitLab(token=TOKEN)
    with fake.running():
        for iid in range(1, 8):
            fake.add_mr(iid, f"{iid:040x}")
        fake.mrs[7]["state"] = "merged"
        forge = GitLabForge(fake.url, fake.project, Secret(TOKEN), per_page=4, sleep=sleeps)
        fake.faults.append((429, {"Retry-After": "5"}))
        fake.faults.append((502, {}))
        prs = forge.open_pull_requests()
        assert sorted(p.number for p in prs) == [1, 2, 3, 4, 5, 6]
        assert prs[0].head_sha == f"{6:040x}" and prs[0].head_ref == "mr-6"
        assert sleeps == [5.0, 1.0]  # Retry-After of the 429, then backoff for the 502
        pr = prs[0]
        for i in range(5):
            fake.add_note(6, f"review {i} {MARKER}")
        assert forge.upsert_comment(pr, f"{MARKER}\none").action == "created"
        assert forge.upsert_comment(pr, f"{MARKER}\ntwo").action == "edited"
        ours = [n for n in fake.notes_on(6) if n["body"].startswith(MARKER)]
        assert [n["body"] for n in ours] == [f"{MARKER}\ntwo"]
        assert [m for m, _, _ in fake.log].count("POST") == 1 and [m for m, _, _ in fake.log].count("PUT") == 1
        bad = GitLabForge(fake.url, fake.project, Secret("wrong-token-123456"), sleep=sleeps)
        with pytest.raises(ForgeError) as caught:
            bad.open_pull_requests()
        assert caught.value.status == 401 and "wrong-token-123456" not in str(caught.value)


def test_a_permission_403_is_not_retried(fake: FakeGitHub, forge: GitHubForge, sleeps: Sleeps) -> None:
    pr = _pr(fake)
    fake.inject(403, body={"message": "Resource not accessible by integration",
                           "documentation_url": "https://docs.github.com/rest/issues/comments"}, methods={"POST"})
    with pytest.raises(ForgeError) as caught:
        forge.upsert_comment(pr, f"{MARKER}\nplan")
    assert caught.value.status == 403 and not caught.value.rate_limited and not caught.value.transient
    assert "Resource not accessible" in str(caught.value)
    assert fake.count("POST") == 1 and sleeps == [] and fake.comments_on(1) == []
