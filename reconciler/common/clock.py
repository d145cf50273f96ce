"""The daemon's wall clock: timestamps (runs, check results, status) and daily check slots.

It is `time.time()`. Intervals (drift interval, retry backoff, interval health checks, PR reports, durations)
are measured on `time.monotonic()` instead, so a wall clock stepped back or forward neither stops them nor
fires them at once. Tests of clock jumps (tests/faults) set RECONCILER_CLOCK_OFFSET_FILE to a file holding
seconds to add, so that one daemon sees its wall clock jump without touching the machine's clock; unset
(always, in production) the file is never read.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

ENV = "RECONCILER_CLOCK_OFFSET_FILE"


def _offset() -> float:
    path = os.environ.get(ENV)
    if not path:
        return 0.0
    try:
        with open(path) as handle:
            return float(handle.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def wall() -> float:
    """Seconds since the epoch, as the daemon's schedules see them."""
    return time.time() + _offset()


def utcnow() -> datetime:
    """The current time, timezone-aware UTC, as the daemon's schedules see it."""
    return datetime.fromtimestamp(wall(), UTC)
