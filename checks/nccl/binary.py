"""Which collective an nccl-tests program runs, from its name (a path, an echoed command line)."""

from __future__ import annotations

import re

BINARY_HINT = re.compile(r"\b(?P<binary>[a-z][a-z0-9_]*_perf)(?:_\w+)?\b")


def collective_from_binary(binary: str) -> str:
    """Collective name of an nccl-tests program: './build/all_reduce_perf_mpi' -> 'all_reduce'."""
    base = binary.rstrip("/").rsplit("/", 1)[-1]
    match = re.match(r"^(?P<name>.+?)_perf(?:_.*)?$", base)
    return match.group("name") if match else base
