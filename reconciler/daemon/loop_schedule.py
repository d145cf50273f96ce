"""When the reconcile loop runs without a new commit: the drift interval, and the retry backoff of a failing commit."""

from __future__ import annotations

import time

from reconciler.daemon.loop_core import Common
from reconciler.model import parse_duration


class Schedule:
    """The cycle's timing: when the last run ended, and the backoff of the commit that keeps failing.

    Intervals are measured on time.monotonic(), never on the wall clock: a clock set back or forward (NTP
    stepping it, an admin) neither stops drift checks for the length of the jump nor fires them at once.
    Health checks and PR reports have their own schedule in the workers (reconciler/daemon/workers.py).
    """

    def __init__(self, common: Common) -> None:
        self.common = common
        self.last_reconcile: float | None = None  # time.monotonic() when the last run ended (None: none yet)
        self.failures = 0
        self.retry_at = 0.0  # time.monotonic() of the next retry (0: none)
        self.failed_commit: str | None = None

    def due(self, now: float) -> bool:
        """True when the drift interval or a retry says a reconcile is due without a new commit (NOW: monotonic)."""
        if self.retry_at and now >= self.retry_at:
            return True
        last = self.last_reconcile
        return last is None or now - last >= self.common.config.seconds("drift_interval")

    def next_wake(self, now: float) -> float:
        """Seconds until the next drift check or retry (NOW: time.monotonic())."""
        last = self.last_reconcile
        times = [now if last is None else last + self.common.config.seconds("drift_interval")]
        if self.retry_at:
            times.append(self.retry_at)
        return max(0.0, min(times) - now)

    def wants(self, commit: str, pending: bool, new: bool, force: bool, now: float) -> bool:
        """Whether COMMIT is reconciled now: forced, new, PENDING (not applied) and not backing off, or due; never
        a failed commit before its retry time unless forced or new."""
        if not (force or new or pending and not self.retry_at or self.due(now)):
            return False
        return not (self.retry_at and now < self.retry_at and commit == self.failed_commit and not (force or new))

    def after_outcome(self, outcome: str, commit: str) -> None:
        """Backoff for failures of the same commit; a newer commit is tried at once."""
        if outcome in ("failed", "error", "partial"):
            if commit != self.failed_commit:
                self.failures = 0
            self.failures += 1
            self.failed_commit = commit
            retry = self.common.config.retry
            backoff = parse_duration(retry.initial) * 2 ** (self.failures - 1)
            delay = float(min(backoff, parse_duration(retry.max)))
            self.retry_at = time.monotonic() + delay
            self.common.log.warning("run.retry_scheduled", commit=commit, attempt=self.failures, in_seconds=delay)
        elif outcome != "stopped":
            self.failures, self.retry_at, self.failed_commit = 0, 0.0, None

    def ended(self) -> None:
        """A run ended now: the drift interval counts from here."""
        self.last_reconcile = time.monotonic()
