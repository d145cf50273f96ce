"""The results table of nccl-tests text output: its columns (named by the header line) and its rows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from reconciler.checks.nccl.models import Layout, NcclRow

MODERN_COLUMNS = [
    "size", "count", "type", "redop", "root",
    "time", "algbw", "busbw", "#wrong",
    "time", "algbw", "busbw", "#wrong",
]  # fmt: skip
_TIME_COLUMNS = {"time", "cputime"}
_INT_PREFIX = {"size", "count", "root"}

_TIMESTAMP = re.compile(r"\s+(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\s*$")


def layout_of(columns: list[str]) -> Layout:
    """Layout named by a table's columns: 'error' before 2.13, '#wrong' from 2.13 on."""
    if "#wrong" in columns:
        return "2.13+"
    if "error" in columns:
        return "pre-2.13"
    return "unknown"


@dataclass(frozen=True)
class Columns:
    """Column names of one table: the fixed prefix and the out-of-place and in-place halves."""

    prefix: list[str]
    oop: list[str]
    ip: list[str]

    @property
    def names(self) -> list[str]:
        """All column names in order."""
        return [*self.prefix, *self.oop, *self.ip]


def columns_from(names: list[str]) -> Columns | None:
    """Split header names at the two time columns; None when the header is not a results table."""
    names = [n for n in names if n != "timestamp"]
    times = [i for i, name in enumerate(names) if name in _TIME_COLUMNS]
    if len(times) != 2 or names[:1] != ["size"]:
        return None
    return Columns(prefix=names[: times[0]], oop=names[times[0] : times[1]], ip=names[times[1] :])


DEFAULT_COLUMNS = columns_from(MODERN_COLUMNS)


def _number(token: str) -> float | None:
    """A printed number, or None for N/A; raises ValueError for anything else."""
    if token.upper() == "N/A":
        return None
    return float(token)


def _prefix_values(columns: Columns, tokens: list[str]) -> dict[str, Any] | None:
    """Values of the size/count/type/redop/root columns; None when the tokens do not fit."""
    values: dict[str, Any] = {}
    for name, token in zip(columns.prefix, tokens, strict=True):
        if name in _INT_PREFIX:
            if not re.fullmatch(r"-?\d+", token):
                return None
            values[name] = int(token)
        else:
            values[name] = token
    return values


def _half_values(half: str, names: list[str], tokens: list[str]) -> dict[str, Any]:
    """Values of one placement's columns (time, algbw, busbw, #wrong or error, optional extras)."""
    values: dict[str, Any] = {}
    extra: dict[str, float] = {}
    for name, token in zip(names, tokens, strict=True):
        number = _number(token)
        if name in _TIME_COLUMNS:
            values[f"{half}_time_us"] = number
        elif name in ("algbw", "busbw"):
            values[f"{half}_{name}"] = number
        elif name == "#wrong":
            values[f"{half}_wrong"] = None if number is None else int(number)
        elif name == "error":
            values[f"{half}_error"] = number
        elif number is not None:
            extra[f"{half}_{name}"] = number
    values["extra"] = extra
    return values


def parse_row(columns: Columns, line: str) -> NcclRow | None:
    """One results row under the given columns; None when the line is not such a row."""
    timestamp = _TIMESTAMP.search(line)
    text = line[: timestamp.start()] if timestamp else line
    tokens = text.split()
    np_, no = len(columns.prefix), len(columns.oop)
    if len(tokens) != len(columns.names):
        return None
    try:
        prefix = _prefix_values(columns, tokens[:np_])
        if prefix is None:
            return None
        oop = _half_values("oop", columns.oop, tokens[np_ : np_ + no])
        ip = _half_values("ip", columns.ip, tokens[np_ + no :])
    except ValueError:
        return None
    extra = {**oop.pop("extra"), **ip.pop("extra")}
    return NcclRow(**prefix, **oop, **ip, extra=extra, timestamp=timestamp.group("ts") if timestamp else None)
