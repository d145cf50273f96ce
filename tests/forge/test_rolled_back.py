"""A merged pull request whose commit was rolled back says so: on the stand-in GitHub server, through PyGithub (and
our Gitea client against its Gitea flavour)."""

from __future__ import annotations

import pytest

from reconciler.engine.report import MARKER
from reconciler.forge.github import GitHubForge
from reconciler.forge.rolled_back import BANNER_START, banner, merged_pr_number, note_rolled_back, with_banner
from tests.forge.conftest import TOKEN, Sleeps
from tests.forge.fake_github import FakeGitHub
from tests.forge.stands import running_stand

COMMIT = "ab" * 20
RECORD = {"wave": 1, "gate": "smoke-job", "nodes": "gpu01", "reverted": "gpu01", "to": "cd" * 20,
          "message": "smoke job failed on gpu01: drained by Slurm: Prolog error", "resumed": ["gpu01"]}


@pytest.mark.parametrize(("message", "number"), [
    ("Merge pull request #12 from acme/prolog\n\nNew prolog", 12),                      # GitHub merge commit
    ("Prolog that checks the GPUs (#34)\n\n* first\n* second", 34),                      # squash merge
    ("Merge pull request 'prolog' (#7) from prolog into main", 7),                       # Gitea
    ("Merge pull request 'it's (#3)' (!8) from alice/cluster:prolog into main\n\nReviewed-on: "
     "https://gitea.example/acme/cluster/pulls/8", 8),                 # Gitea, fork, external issue tracker
    ("Prolog that checks the GPUs (!9)\n\nReviewed-on: https://gitea.example/acme/cluster/pulls/9", 9),  # its squash
    ("Merge branch 'prolog' into 'main'\n\nNew prolog\n\nSee merge request hpc/cluster!56", 56),  # GitLab
    ("Edit prolog directly on main", None), ("Fix #12 in the prolog", None),
])
def test_the_pull_request_is_read_from_the_merge_message(message: str, number: int | None) -> None:
    assert merged_pr_number(message) == number


def test_banner_names_gate_nodes_reason_and_how_to_retry_and_stays_one() -> None:
    note = banner(COMMIT, RECORD)
    assert "smoke-job" in note and "`gpu01`" in note and "Prolog error" in note
    assert f"reconciler rollout retry {COMMIT[:12]}" in note
    body = with_banner(f"{MARKER}\n## Plan\nold plan text\n", note)
    again = with_banner(body, banner(COMMIT, {**RECORD, "gate": "soak"}))
    assert again.count(BANNER_START) == 1 and "soak" in again and "old plan text" in again
    assert again.startswith(MARKER + "\n" + BANNER_START)


def test_a_first_commit_restore_says_what_was_restored_never_to_a_commit() -> None:
    """No earlier commit: the banner carries the restore's headline, never 'put back ... to -'; an incomplete
    restore is not titled 'Rolled back'."""
    from reconciler.daemon.rollouts import rolled_back_record
    from reconciler.rollout.runner import RolloutResult
    from reconciler.rollout.waves import WavePlan

    rollback = {"ok": True, "nodes": "gpu01", "to": None, "before_image": True, "resumed": ["gpu01"],
                "restored": {"gpu01": ["/etc/slurm/prolog.sh back to its 17 bytes before the apply"]},
                "unchanged": {}, "not_restored": {}}
    result = RolloutResult("rolled-back", COMMIT, None, WavePlan([], [], 0, "progressive"), failed_wave=1,
                           failed_gate={"gate": "smoke-job", "nodeset": "gpu01", "message": "Prolog error"},
                           rollback=rollback)
    note = banner(COMMIT, rolled_back_record(result))
    assert "restored gpu01 to the state found before the apply" in note and "to `-`" not in note
    assert "Put back" not in note and ":rewind: Rolled back" in note
    incomplete = {**rollback, "ok": False, "not_restored": {"gpu02": ["secret file /etc/x: no copy kept"]}}
    result.status, result.rollback = "rollback-failed", incomplete
    note = banner(COMMIT, rolled_back_record(result))
    assert "Rollback INCOMPLETE" in note and "Rolled back:" not in note and "INCOMPLETE: 1 resource(s)" in note


def test_hostile_text_cannot_break_out_of_the_banner() -> None:
    note = banner(COMMIT, {**RECORD, "message": "x`<img src=x onerror=alert(1)>`\n# heading", "nodes": "a`b"})
    assert "<img" not in note and "`b`" not in note and "\n# heading" not in note


@pytest.mark.parametrize(("kind", "message"), [
    ("github", "Merge pull request #12 from acme/prolog"),
    ("gitea", "Merge pull request 'prolog' (#12) from prolog into main\n\nReviewed-on: https://gitea.example/pulls/12"),
])
def test_the_merged_prs_comment_gets_the_banner_above_its_plan(kind: str, message: str, sleeps: Sleeps) -> None:
    with running_stand(kind, TOKEN, sleeps) as stand:
        fake = stand.server
        assert isinstance(fake, FakeGitHub)
        fake.add_pull(12, "12" * 20, "prolog", "prolog")
        fake.pulls[12]["state"] = "closed"  # merged
        ours = fake.add_comment(12, f"{MARKER}\n## reconciler plan\n1 change on gpu[01-16]", login=fake.login)
        done = note_rolled_back(stand.forge, message, COMMIT, RECORD)
        assert done is not None and done.action == "edited" and done.comment.id == ours
        body = fake.comments[ours]["body"]
        assert body.index("Rolled back") < body.index("reconciler plan") and "1 change on gpu[01-16]" in body
        assert len(fake.comments_on(12)) == 1 and fake.requests[-1].path.startswith(fake.prefix)


def test_a_direct_push_touches_no_pull_request(fake: FakeGitHub, forge: GitHubForge) -> None:
    before = len(fake.requests)
    assert note_rolled_back(forge, "hotfix on main", COMMIT, RECORD) is None
    assert len(fake.requests) == before
