"""The wall clock the daemon's schedules read (drift interval, retries, health-check schedules, timestamps).

It is `time.time()`. Tests of clock jumps (tests/faults) set RECONCILER_CLOCK_OFFSET_FILE to a file holding
seconds to add, so that one daemon sees its clock jump without touching the machine's clock; unset (always,
in production) the file is never read.
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
