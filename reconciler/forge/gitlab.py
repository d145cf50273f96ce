"""GitLab (gitlab.com or self-managed) through python-gitlab: merge requests and their notes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import gitlab
import requests

from reconciler.forge.base import Comment, Forge, ForgeError, PullRequest, Secret, Sleep, redact
from reconciler.forge.http import ForgeRetry, retrying_session

DEFAULT_URL = "https://gitlab.com"
GITLAB_NOTE_LIMIT = 1_000_000


class _Gitlab(gitlab.Gitlab):
    """python-gitlab with its own retry loop off: ForgeRetry (in the session) already waited and retried."""

    def http_request(self, *args: Any, **kwargs: Any) -> Any:
        """Send one request; never sleep here (time.sleep could not be injected)."""
        kwargs.update(obey_rate_limit=False, retry_transient_errors=False, max_retries=0)
        return super().http_request(*args, **kwargs)


class GitLabForge(Forge):
    """A GitLab project. URL is the server root (https://gitlab.com); REPO the project path or numeric id."""

    kind = "gitlab"
    comment_limit = GITLAB_NOTE_LIMIT

    def __init__(self, url: str, repo: str, token: Secret, *, per_page: int = 50, timeout: float = 30,
                 sleep: Sleep = time.sleep, max_rate_limit_wait: float = 300.0,
                 retry: ForgeRetry | None = None) -> None:
        super().__init__(sleep=sleep)
        self.url = (url or DEFAULT_URL).rstrip("/")
        self.repo_name = repo
        self._token = token
        session = retrying_session(retry or ForgeRetry(sleep=sleep, max_wait=max_rate_limit_wait))
        self._gl = _Gitlab(self.url, private_token=token.reveal(), session=session, per_page=per_page,
                           timeout=timeout)
        self._project = self._gl.projects.get(repo, lazy=True)
        self._notes: dict[tuple[int, int], Any] = {}

    @property
    def ident(self) -> str:
        """`gitlab:<url>/<project>`."""
        return f"gitlab:{self.url}/{self.repo_name}"

    def pr_ref(self, number: int) -> str:
        """GitLab keeps every merge request head at refs/merge-requests/IID/head."""
        return f"refs/merge-requests/{number}/head"

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except gitlab.exceptions.GitlabError as exc:
            status = exc.response_code
            raise ForgeError(redact(f"{what}: HTTP {status}: {exc.error_message}", [self._token]), status,
                             rate_limited=status == 429) from None
        except (requests.RequestException, OSError) as exc:
            raise ForgeError(redact(f"{what}: {type(exc).__name__}: {exc}", [self._token])) from None

    def open_pull_requests(self) -> list[PullRequest]:
        """Every opened merge request (all pages)."""
        with self._errors(f"list open merge requests of {self.repo_name}"):
            return [PullRequest(number=int(mr.iid), head_sha=mr.sha, head_ref=mr.source_branch, title=mr.title or "")
                    for mr in self._project.mergerequests.list(state="opened", iterator=True)]

    def _mr(self, pr: PullRequest) -> Any:
        return self._project.mergerequests.get(pr.number, lazy=True)

    def comments(self, pr: PullRequest) -> Iterator[Comment]:
        """The merge request's notes written by people or bots (system notes left out), oldest first."""
        items = []
        with self._errors(f"list notes of !{pr.number}"):
            for note in self._mr(pr).notes.list(iterator=True, sort="asc", order_by="created_at"):
                if getattr(note, "system", False):
                    continue
                self._notes[(pr.number, int(note.id))] = note
                items.append(Comment(id=int(note.id), body=note.body or ""))
        yield from items

    def create_comment(self, pr: PullRequest, body: str) -> Comment:
        """POST /projects/:id/merge_requests/:iid/notes."""
        with self._errors(f"comment on !{pr.number}"):
            note = self._mr(pr).notes.create({"body": body})
        self._notes[(pr.number, int(note.id))] = note
        return Comment(id=int(note.id), body=note.body or body)

    def edit_comment(self, pr: PullRequest, comment: Comment, body: str) -> Comment:
        """PUT /projects/:id/merge_requests/:iid/notes/:note_id."""
        with self._errors(f"edit note {comment.id} on !{pr.number}"):
            note = self._notes.get((pr.number, comment.id)) or self._mr(pr).notes.get(comment.id)
            note.body = body
            note.save()
        return Comment(id=comment.id, body=body)
