"""The forge interface: open pull requests, and the one comment per pull request that we keep up to date."""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from reconciler.engine.report import MARKER

Sleep = Callable[[float], None]
GITHUB_COMMENT_LIMIT = 65_536
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


class Secret:
    """A token that does not show itself in repr(), str(), logs or tracebacks."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The token itself (for the HTTP client only)."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)


def redact(text: str, secrets: Iterable[Secret | str | None] = ()) -> str:
    """TEXT with every secret, and the user:password part of URLs, replaced by ***."""
    for secret in secrets:
        value = secret.reveal() if isinstance(secret, Secret) else secret
        if value:
            text = text.replace(value, "***")
    return _URL_USERINFO.sub("***@", text)


class ForgeError(Exception):
    """A forge request failed (after retries); the message never holds the token."""

    def __init__(self, message: str, status: int | None = None, *, rate_limited: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.rate_limited = rate_limited

    @property
    def transient(self) -> bool:
        """True for server errors, rate limits and connection failures: worth trying again later."""
        return self.rate_limited or self.status is None or self.status >= 500 or self.status == 429


@dataclass(frozen=True)
class PullRequest:
    """An open pull (merge) request: its number, head commit, head branch and title."""

    number: int
    head_sha: str
    head_ref: str
    title: str


@dataclass(frozen=True)
class Comment:
    """A comment on a pull request."""

    id: int
    body: str
    url: str = ""


@dataclass(frozen=True)
class Upserted:
    """What upsert_comment did: the comment, and whether it was created, edited or already up to date."""

    comment: Comment
    action: Literal["created", "edited", "unchanged"]


def is_ours(body: str, marker: str) -> bool:
    """True when a comment body is one of ours: it starts with the hidden marker."""
    return body.lstrip().startswith(marker)


class Forge(ABC):
    """A code forge (GitHub, GitLab, Gitea/Forgejo) seen as open PRs and the one comment we keep on each."""

    kind: str = ""
    #: The longest comment body the forge accepts, in characters.
    comment_limit: int = GITHUB_COMMENT_LIMIT

    def __init__(self, *, sleep: Sleep = time.sleep, create_attempts: int = 3) -> None:
        self.sleep = sleep
        self.create_attempts = create_attempts

    @property
    @abstractmethod
    def ident(self) -> str:
        """A stable name for this forge and repository (the cache key), e.g. `github:owner/repo`."""

    @abstractmethod
    def open_pull_requests(self) -> list[PullRequest]:
        """Every open pull request of the repository (all pages)."""

    @abstractmethod
    def pr_ref(self, number: int) -> str:
        """The Git ref that holds a pull request's head on the forge's Git server."""

    @abstractmethod
    def comments(self, pr: PullRequest) -> Iterator[Comment]:
        """The pull request's comments, oldest first (all pages)."""

    @abstractmethod
    def create_comment(self, pr: PullRequest, body: str) -> Comment:
        """Post a new comment."""

    @abstractmethod
    def edit_comment(self, pr: PullRequest, comment: Comment, body: str) -> Comment:
        """Replace a comment's body."""

    def find_comment(self, pr: PullRequest, marker: str = MARKER) -> Comment | None:
        """Our comment on the pull request (the first one starting with MARKER), or None."""
        return next((c for c in self.comments(pr) if is_ours(c.body, marker)), None)

    def upsert_comment(self, pr: PullRequest, body: str, marker: str = MARKER) -> Upserted:
        """Edit our comment in place if there is one, else create it: one comment per pull request."""
        if len(body) > self.comment_limit:
            raise ValueError(f"comment of {len(body)} characters is over the forge's limit of {self.comment_limit}")
        if not is_ours(body, marker):
            body = f"{marker}\n{body}"
        for attempt in range(1, self.create_attempts + 1):
            found = self.find_comment(pr, marker)
            if found is not None:
                if found.body == body:
                    return Upserted(found, "unchanged")
                return Upserted(self.edit_comment(pr, found, body), "edited")
            try:
                return Upserted(self.create_comment(pr, body), "created")
            except ForgeError as exc:
                self.after_failed_create(exc, attempt, self.create_attempts)
        raise AssertionError("unreachable")

    def after_failed_create(self, exc: ForgeError, attempt: int, attempts: int) -> None:
        """Re-raise EXC unless a retry is worth it, else wait before it. A POST that failed with a server error may
        still have created the comment: the caller looks again before posting again, so a retry never leaves two."""
        if not exc.transient or exc.rate_limited or attempt == attempts:
            raise exc
        self.sleep(min(2.0 ** attempt, 30.0))
