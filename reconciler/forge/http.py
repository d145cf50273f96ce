"""HTTP retries shared by every forge client: rate limits waited out, server errors retried with backoff.

The policy lives in a urllib3 `Retry`, so it works under PyGithub, python-gitlab and plain requests alike
(each request is retried on its own, a paginated listing does not start over):

- 403 or 429 that is a rate limit (a `Retry-After` header, or `x-ratelimit-remaining: 0` with
  `x-ratelimit-reset`; GitLab's `RateLimit-*` names too; a 429 without either waits `secondary_wait`):
  wait as told, then retry, any method (a rate-limited request was not processed). A wait longer than
  `max_wait` is not waited: the response goes back to the client, which raises;
- any other 403 is returned at once (permissions);
- 5xx: retried with exponential backoff for idempotent methods (GET, PUT, PATCH, DELETE); a POST is not
  replayed here, `Forge.upsert_comment` looks for the comment before posting again.

Sleeping and the clock are injectable, so tests do not wait.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3 import Retry
from urllib3.exceptions import MaxRetryError, ResponseError

from reconciler.forge.base import Sleep

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE"})
RATE_LIMIT_STATUS = (403, 429)


def _header(headers: Mapping[str, str], *names: str) -> str | None:
    lower = {k.lower(): v for k, v in headers.items()}
    for name in names:
        value = lower.get(name.lower())
        if value is not None and value.strip():
            return value.strip()
    return None


def rate_limit_wait(status: int, headers: Mapping[str, str], now: float, secondary_wait: float = 60.0) -> float | None:
    """Seconds to wait before retrying a 403/429 rate-limit response, or None when it is not a rate limit."""
    if status not in RATE_LIMIT_STATUS:
        return None
    retry_after = _header(headers, "Retry-After")
    if retry_after is not None:
        if retry_after.isdigit():
            return float(retry_after)
        try:
            return max(0.0, email.utils.parsedate_to_datetime(retry_after).timestamp() - now)
        except (TypeError, ValueError):
            return secondary_wait
    remaining = _header(headers, "x-ratelimit-remaining", "RateLimit-Remaining")
    reset = _header(headers, "x-ratelimit-reset", "RateLimit-Reset")
    if remaining == "0" and reset is not None and reset.isdigit():
        # GitHub documents the reset as epoch seconds; add a second, as GitHub's own client does.
        return max(0.0, int(reset) - now) + 1.0
    if remaining == "0" or status == 429:
        return secondary_wait
    return None


class ForgeRetry(Retry):
    """urllib3 Retry with the forge policy (see the module docstring) and an injectable sleep."""

    def __init__(self, *, sleep: Sleep = time.sleep, clock: Callable[[], float] = time.time,
                 max_wait: float = 300.0, secondary_wait: float = 60.0, next_wait: float | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("total", 6)
        kwargs.setdefault("backoff_factor", 0.5)
        kwargs.setdefault("backoff_max", 30.0)
        kwargs.setdefault("allowed_methods", IDEMPOTENT)
        kwargs.setdefault("status_forcelist", (500, 502, 503, 504))
        kwargs["raise_on_status"] = False  # give the last response back: the client raises its own error
        kwargs.setdefault("raise_on_redirect", False)
        super().__init__(**kwargs)
        self.sleeper = sleep
        self.clock = clock
        self.max_wait = max_wait
        self.secondary_wait = secondary_wait
        self.next_wait = next_wait

    def new(self, **kw: Any) -> ForgeRetry:
        """A copy for the next attempt (urllib3 calls this on every retry)."""
        kw.setdefault("sleep", self.sleeper)
        kw.setdefault("clock", self.clock)
        kw.setdefault("max_wait", self.max_wait)
        kw.setdefault("secondary_wait", self.secondary_wait)
        kw.setdefault("next_wait", None)
        return super().new(**kw)  # type: ignore[return-value]

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        """Rate limits for every method (increment decides), server errors for idempotent ones."""
        if status_code in RATE_LIMIT_STATUS:
            return True
        return super().is_retry(method, status_code, has_retry_after)

    def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                  error: Exception | None = None, _pool: Any = None, _stacktrace: Any = None) -> ForgeRetry:
        """Count an attempt; for a rate limit, remember how long to wait (or give the response back)."""
        wait = None
        if response is not None and response.status in RATE_LIMIT_STATUS:
            wait = rate_limit_wait(response.status, response.headers, self.clock(), self.secondary_wait)
            if wait is None or wait > self.max_wait:
                # Not a rate limit (a plain 403), or one that resets too late: the caller gets the response.
                raise MaxRetryError(_pool, url or "", ResponseError(f"status {response.status}, not retried"))
        new = super().increment(method, url, response, error, _pool, _stacktrace)
        assert isinstance(new, ForgeRetry)
        new.next_wait = wait
        return new

    def sleep(self, response: Any = None) -> None:
        """Wait before the next attempt: the rate-limit wait, else Retry-After, else exponential backoff."""
        wait = self.next_wait
        if wait is None and response is not None and self.respect_retry_after_header:
            wait = self.get_retry_after(response)
        if wait is None:
            wait = self.get_backoff_time()
        if wait > 0:
            self.sleeper(wait)


def retrying_session(retry: ForgeRetry, token_header: tuple[str, str] | None = None) -> requests.Session:
    """A requests Session whose every request goes through RETRY (and carries the auth header, if given)."""
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    if token_header is not None:
        session.headers[token_header[0]] = token_header[1]
    return session
