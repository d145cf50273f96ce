"""Gitea and Forgejo through their REST API (/api/v1), with plain requests.

Their API is close to GitHub's (same paths for pulls and issue comments, `Authorization: token ...`, Link
headers), but pages are sized with `limit`, not `per_page`, and PyGithub's model classes do not fit its
responses well enough to rely on, so this is a small client of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import requests

from reconciler.forge.base import Comment, Forge, ForgeError, PullRequest, Secret, Sleep, redact
from reconciler.forge.http import ForgeRetry, retrying_session


class GiteaForge(Forge):
    """A Gitea/Forgejo repository. URL is the API root, e.g. https://gitea.example.com/api/v1."""

    kind = "gitea"

    def __init__(self, url: str, repo: str, token: Secret, *, per_page: int = 50, timeout: float = 30,
                 sleep: Sleep = time.sleep, max_rate_limit_wait: float = 300.0,
                 retry: ForgeRetry | None = None) -> None:
        super().__init__(sleep=sleep)
        url = url.rstrip("/")
        self.url = url if url.endswith("/api/v1") else f"{url}/api/v1"
        self.repo_name = repo
        self.per_page = per_page
        self.timeout = timeout
        self._token = token
        retry = retry or ForgeRetry(sleep=sleep, max_wait=max_rate_limit_wait)
        self._session = retrying_session(retry, ("Authorization", f"token {token.reveal()}"))
        self._session.headers["Accept"] = "application/json"

    @property
    def ident(self) -> str:
        """`gitea:<api url>/<owner>/<repo>`."""
        return f"gitea:{self.url}/{self.repo_name}"

    def pr_ref(self, number: int) -> str:
        """Gitea and Forgejo keep PR heads at refs/pull/N/head, as GitHub does."""
        return f"refs/pull/{number}/head"

    def _request(self, method: str, url: str, what: str, **kwargs: Any) -> requests.Response:
        try:
            response = self._session.request(method, url, timeout=self.timeout, **kwargs)
        except requests.RequestException as exc:
            raise ForgeError(redact(f"{what}: {type(exc).__name__}: {exc}", [self._token])) from None
        if response.status_code >= 400:
            try:
                message = str(response.json().get("message", ""))
            except ValueError:
                message = response.text[:500]
            limited = response.status_code in (403, 429) and (
                "Retry-After" in response.headers or response.headers.get("x-ratelimit-remaining") == "0"
                or response.status_code == 429)
            raise ForgeError(redact(f"{what}: HTTP {response.status_code}: {message}", [self._token]),
                             response.status_code, rate_limited=limited)
        return response

    def _pages(self, path: str, what: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list, following the Link headers."""
        url: str | None = f"{self.url}{path}"
        query: dict[str, Any] | None = {**(params or {}), "limit": self.per_page, "page": 1}
        while url:
            response = self._request("GET", url, what, params=query)
            yield from response.json() or []
            url = response.links.get("next", {}).get("url")
            query = None  # the next link carries the query

    def open_pull_requests(self) -> list[PullRequest]:
        """GET /repos/{owner}/{repo}/pulls?state=open, all pages."""
        return [PullRequest(number=int(p["number"]), head_sha=p["head"]["sha"], head_ref=p["head"].get("ref", ""),
                            title=p.get("title") or "")
                for p in self._pages(f"/repos/{self.repo_name}/pulls", "list open pull requests",
                                     {"state": "open"})]

    def comments(self, pr: PullRequest) -> Iterator[Comment]:
        """GET /repos/{owner}/{repo}/issues/{index}/comments (all pages)."""
        for c in self._pages(f"/repos/{self.repo_name}/issues/{pr.number}/comments", f"list comments of #{pr.number}"):
            yield Comment(id=int(c["id"]), body=c.get("body") or "", url=c.get("html_url", ""))

    def create_comment(self, pr: PullRequest, body: str) -> Comment:
        """POST /repos/{owner}/{repo}/issues/{index}/comments."""
        data = self._request("POST", f"{self.url}/repos/{self.repo_name}/issues/{pr.number}/comments",
                             f"comment on #{pr.number}", json={"body": body}).json()
        return Comment(id=int(data["id"]), body=data.get("body", body), url=data.get("html_url", ""))

    def edit_comment(self, pr: PullRequest, comment: Comment, body: str) -> Comment:
        """PATCH /repos/{owner}/{repo}/issues/comments/{id}."""
        data = self._request("PATCH", f"{self.url}/repos/{self.repo_name}/issues/comments/{comment.id}",
                             f"edit comment {comment.id} on #{pr.number}", json={"body": body}).json()
        return Comment(id=comment.id, body=data.get("body", body), url=data.get("html_url", comment.url))
