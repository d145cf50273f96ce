"""The order of a failed load's errors: root causes first, and one error repeated at many places shown once counted.

A file that did not load (too large, not YAML) or a key defined twice leaves out what other places refer to, so
the errors it causes ("account 'ml' is not an account here", for every user) would bury it, sorted by file:line
among them. Those root causes come first; then the rest by file:line, where an error with the same message at
many places is shown at its first SHOWN_ALIKE places, and the next one carries how many more there are.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from reconciler.desired.errors import ConfigError

SHOWN_ALIKE = 5


def _by_place(error: ConfigError) -> tuple[str, int]:
    loc = error.location
    return (loc.file, loc.line) if loc is not None else ("", 0)


def arrange(roots: list[ConfigError], others: list[ConfigError]) -> list[ConfigError]:
    """ROOTS (errors that cause others) first, then OTHERS; each by file:line, repeats counted, not listed."""
    return _alike(sorted(roots, key=_by_place), None) + _alike(sorted(others, key=_by_place), len(roots))


def _alike(errors: list[ConfigError], roots: int | None) -> list[ConfigError]:
    """Keep SHOWN_ALIKE errors of each message; the next one says how many more (and, after ROOTS, why)."""
    total = Counter(e.message for e in errors)
    seen: Counter[str] = Counter()
    out: list[ConfigError] = []
    for error in errors:
        seen[error.message] += 1
        count = seen[error.message]
        rest = total[error.message] - SHOWN_ALIKE
        if count <= SHOWN_ALIKE or rest == 1:
            out.append(error)
        elif count == SHOWN_ALIKE + 1:
            why = (f"; it may follow from the {roots} error(s) listed first: fix those first" if roots else "")
            out.append(dataclasses.replace(error, message=f"{error.message} (here and at {rest - 1} more "
                                           f"place(s) after this one, not shown{why})"))
    return out
