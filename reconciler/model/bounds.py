"""Values that must make sense, not only have the right type: durations, Slurm's integer ranges, sizes.

Each rule is a pydantic type, so a value out of bounds is refused by the loader at its file:line with the reason
(the daemon's config file likewise), before anything reaches a node or a controller.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

SECOND, MINUTE, HOUR, DAY = 1, 60, 3600, 86400
_DURATION = re.compile(r"^(\d+)\s*(s|m|h|d)?$")
_UNITS = {"s": SECOND, "m": MINUTE, "h": HOUR, "d": DAY}

# Slurm keeps these counts in C integers and reserves the top values (NO_VAL, INFINITE); past them a value wraps
# or is read as "unset" on the controller, long after the commit was merged.
U16_MAX = 0xFFFF - 2  # slurm NO_VAL16 - 1
U32_MAX = 0xFFFFFFFF - 2  # slurm NO_VAL - 1


def parse_duration(value: str | int) -> int:
    """Turn `90`, `90s`, `15m`, `2h` or `1d` into seconds."""
    if isinstance(value, int):
        return value
    match = _DURATION.match(value.strip())
    if not match:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 15m, 2h, 1d)")
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]


def human(seconds: int) -> str:
    """A duration in the largest unit that divides it: 90 -> 90s, 900 -> 15m, 86400 -> 1d."""
    for unit, size in (("d", DAY), ("h", HOUR), ("m", MINUTE)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"a number is needed here, got {str(value).lower()}")
    return value


def duration_between(low: int, high: int) -> Any:
    """A duration type (`30s`, `15m`, or seconds) whose value must lie in [LOW, HIGH] seconds."""
    def check(value: str | int) -> str | int:
        seconds = parse_duration(value)
        if not low <= seconds <= high:
            what = "at least" if seconds < low else "at most"
            limit = human(low) if seconds < low else human(high)
            raise ValueError(f"must be {what} {limit} (allowed {human(low)} to {human(high)}), got {value!r}")
        return value
    return Annotated[str | int, BeforeValidator(_not_bool), AfterValidator(check)]


def count(low: int, high: int) -> Any:
    """An integer type in [LOW, HIGH] (a boolean is refused, not read as 0 or 1)."""
    return Annotated[int, BeforeValidator(_not_bool), Field(ge=low, le=high)]


def real(low: float, high: float, low_open: bool = False) -> Any:
    """A finite float type in [LOW, HIGH] ((LOW, HIGH] with LOW_OPEN)."""
    bound = Field(gt=low, le=high) if low_open else Field(ge=low, le=high)
    return Annotated[float, BeforeValidator(_not_bool), bound]


# The durations of the schema, by what they time. Below the low end nothing useful can happen in the time (a
# Slurm job cannot start in under a second); above the high end a typo (`15d` for `15m`) would hold a rollout or
# hide a dead daemon for weeks.
GateTimeout = duration_between(1, DAY)
Soak = duration_between(0, DAY)
CheckInterval = duration_between(1, 7 * DAY)
CheckTimeout = duration_between(1, DAY)
Interval = duration_between(1, 7 * DAY)
DrainTimeout = duration_between(1, 7 * DAY)
IdleTimeout = duration_between(0, DAY)  # 0: no persistence
Spacing = duration_between(0, DAY)  # 0: no rate limit / at the first failure
LeaseDuration = duration_between(2, 10 * MINUTE)
RenewInterval = duration_between(1, 5 * MINUTE)
PlanCpu = duration_between(1, HOUR)
PlanWall = duration_between(1, 6 * HOUR)
