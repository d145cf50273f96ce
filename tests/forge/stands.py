"""The forge flavours the shared-comment tests run against: a stand-in server (not the forge) and our client for it.

GitHub (GHES-style `/api/v3`, PyGithub) and Gitea (`/api/v1`, our GiteaForge) are two flavours of
fake_github.py; GitLab (python-gitlab, notes of merge requests) is fake_gitlab.py. A Stand hides which requests
a comment read, create and edit are on each, so one test body drives all three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from reconciler.forge.base import Forge, Secret, Sleep
from reconciler.forge.gitea import GiteaForge
from reconciler.forge.github import GitHubForge
from reconciler.forge.gitlab import GitLabForge
from tests.forge.fake_github import GITEA_PREFIX, FakeGitHub
from tests.forge.fake_gitlab import FakeGitLab

KINDS = ("github", "gitea", "gitlab")


@dataclass
class Stand:
    """One forge flavour under test: its stand-in server, our client for it, and the paths its comments take."""

    kind: str
    forge: Forge
    url: str  # what a daemon's `forge.url` names
    repo: str
    server: FakeGitHub | FakeGitLab

    @property
    def _lab(self) -> bool:
        return isinstance(self.server, FakeGitLab)

    def _list_path(self, number: int) -> str:
        return f"/merge_requests/{number}/notes" if self._lab else f"/issues/{number}/comments"

    def open(self, number: int, sha: str, head_ref: str) -> None:
        """Open pull (merge) request NUMBER at SHA, or move its head."""
        if isinstance(self.server, FakeGitLab):
            self.server.add_mr(number, sha)
            self.server.mrs[number]["source_branch"] = head_ref
        else:
            self.server.add_pull(number, sha, head_ref=head_ref)

    def comments_on(self, number: int) -> list[dict[str, Any]]:
        """The comments (GitLab: notes, system notes left out) of one PR, oldest first, each with id and body."""
        if isinstance(self.server, FakeGitLab):
            return [n for n in self.server.notes_on(number) if not n["system"]]
        return self.server.comments_on(number)

    def before_read(self, number: int, fn: Callable[[], object], nth: int = 1) -> None:
        """Run FN just before the NTH listing of PR NUMBER's comments is served."""
        self.server.before("GET", self._list_path(number), fn, nth)

    def before_create(self, number: int, fn: Callable[[], object]) -> None:
        """Run FN just before the next new comment on PR NUMBER is served."""
        self.server.before("POST", self._list_path(number), fn)

    def before_edit(self, comment_id: int, fn: Callable[[], object]) -> None:
        """Run FN just before the next edit of comment COMMENT_ID is served."""
        if self._lab:
            self.server.before("PUT", f"/notes/{comment_id}", fn)
        else:
            self.server.before("PATCH", f"/issues/comments/{comment_id}", fn)

    @property
    def hooks_left(self) -> int:
        """How many hooks have not run yet."""
        return len(self.server.hooks)

    def reads(self, number: int) -> int:
        """Listings of PR NUMBER's comments served so far."""
        return self.server.count("GET", self._list_path(number))

    def creates(self) -> int:
        """Comments created so far."""
        return self.server.count("POST", "/notes" if self._lab else "/comments")

    def edits(self) -> int:
        """Comment edits so far."""
        return self.server.count("PUT") if self._lab else self.server.count("PATCH")


@contextmanager
def running_stand(kind: str, token: str, sleep: Sleep) -> Iterator[Stand]:
    """The KIND stand-in server, running, with our client for it (no pacing, SLEEP recorded)."""
    if kind == "gitlab":
        lab = FakeGitLab(token=token)
        with lab.running():
            yield Stand(kind, GitLabForge(lab.url, lab.project, Secret(token), sleep=sleep), lab.url, lab.project,
                        lab)
        return
    hub = FakeGitHub(token=token, prefix=GITEA_PREFIX if kind == "gitea" else "/api/v3")
    with hub.running():
        repo = f"{hub.owner}/{hub.repo}"
        forge: Forge = (GiteaForge(hub.base_url, repo, Secret(token), sleep=sleep) if kind == "gitea" else
                        GitHubForge(hub.base_url, repo, Secret(token), throttle=False, sleep=sleep))
        yield Stand(kind, forge, hub.base_url, repo, hub)
