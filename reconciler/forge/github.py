"""GitHub (github.com or GitHub Enterprise Server) through PyGithub."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import requests
from github import Auth, Github, GithubException, RateLimitExceededException
from github.IssueComment import IssueComment
from github.PullRequest import PullRequest as GhPullRequest

from reconciler.forge.base import Comment, Forge, ForgeError, PullRequest, Secret, Sleep, redact
from reconciler.forge.http import ForgeRetry

DEFAULT_URL = "https://api.github.com"


class GitHubForge(Forge):
    """A GitHub repository. URL is the API root: https://api.github.com, or https://HOST/api/v3 for GHES."""

    kind = "github"

    def __init__(self, url: str, repo: str, token: Secret, *, per_page: int = 30, timeout: int = 30,
                 sleep: Sleep = time.sleep, max_rate_limit_wait: float = 300.0, throttle: bool = True,
                 retry: ForgeRetry | None = None) -> None:
        super().__init__(sleep=sleep)
        self.url = (url or DEFAULT_URL).rstrip("/")
        self.repo_name = repo
        self._token = token
        self._retry = retry or ForgeRetry(sleep=sleep, max_wait=max_rate_limit_wait)
        # throttle: PyGithub's pacing (0.25 s between requests, 1 s between writes), as GitHub asks of
        # integrations; tests turn it off.
        pacing: dict[str, Any] = {} if throttle else {"seconds_between_requests": None,
                                                      "seconds_between_writes": None}
        self._gh = Github(base_url=self.url, auth=Auth.Token(token.reveal()), per_page=per_page, timeout=timeout,
                          retry=self._retry, **pacing)
        self._repo: Any = None
        self._pulls: dict[int, GhPullRequest] = {}
        self._comments: dict[int, IssueComment] = {}

    @property
    def ident(self) -> str:
        """`github:<api url>/<owner>/<repo>`."""
        return f"github:{self.url}/{self.repo_name}"

    def pr_ref(self, number: int) -> str:
        """GitHub keeps every PR head at refs/pull/N/head."""
        return f"refs/pull/{number}/head"

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn client errors into ForgeError, with the token redacted."""
        try:
            yield
        except RateLimitExceededException as exc:
            raise ForgeError(redact(f"{what}: rate limited ({exc.status}): {_message(exc)}", [self._token]),
                             exc.status, rate_limited=True) from None
        except GithubException as exc:
            raise ForgeError(redact(f"{what}: HTTP {exc.status}: {_message(exc)}", [self._token]),
                             exc.status) from None
        except (requests.RequestException, OSError) as exc:
            raise ForgeError(redact(f"{what}: {type(exc).__name__}: {exc}", [self._token])) from None

    def _repository(self) -> Any:
        if self._repo is None:
            with self._errors(f"GET repository {self.repo_name}"):
                self._repo = self._gh.get_repo(self.repo_name)
        return self._repo

    def open_pull_requests(self) -> list[PullRequest]:
        """Every open PR (PyGithub follows the Link headers through all pages)."""
        repo = self._repository()
        out = []
        with self._errors(f"list open pull requests of {self.repo_name}"):
            for pull in repo.get_pulls(state="open"):
                self._pulls[pull.number] = pull
                out.append(PullRequest(number=pull.number, head_sha=pull.head.sha, head_ref=pull.head.ref,
                                       title=pull.title or ""))
        return out

    def _pull(self, pr: PullRequest) -> GhPullRequest:
        pull = self._pulls.get(pr.number)
        if pull is None:
            with self._errors(f"GET pull request #{pr.number}"):
                pull = self._repository().get_pull(pr.number)
            self._pulls[pr.number] = pull
        return pull

    def comments(self, pr: PullRequest) -> Iterator[Comment]:
        """The PR's issue comments, all pages."""
        pull = self._pull(pr)
        items = []
        with self._errors(f"list comments of #{pr.number}"):
            for c in pull.get_issue_comments():
                self._comments[c.id] = c
                items.append(Comment(id=c.id, body=c.body or "", url=c.url))
        yield from items

    def create_comment(self, pr: PullRequest, body: str) -> Comment:
        """POST /repos/{owner}/{repo}/issues/{number}/comments."""
        pull = self._pull(pr)
        with self._errors(f"comment on #{pr.number}"):
            created = pull.create_issue_comment(body)
        self._comments[created.id] = created
        return Comment(id=created.id, body=created.body or "", url=created.url)

    def edit_comment(self, pr: PullRequest, comment: Comment, body: str) -> Comment:
        """PATCH /repos/{owner}/{repo}/issues/comments/{id}."""
        with self._errors(f"edit comment {comment.id} on #{pr.number}"):
            existing = self._comments.get(comment.id) or self._pull(pr).get_issue_comment(comment.id)
            existing.edit(body)
        return Comment(id=comment.id, body=existing.body or body, url=existing.url)

def _message(exc: GithubException) -> str:
    data = exc.data
    if isinstance(data, dict):
        text = str(data.get("message", ""))
        details = [str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in data.get("errors", [])]
        return "; ".join([text, *details]) if details else text
    return str(data)[:500]
