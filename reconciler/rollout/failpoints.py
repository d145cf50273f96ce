"""Failpoints for fault-injection tests (like etcd's gofail): a named point in a rollout can be made to pause.

`RECONCILER_FAILPOINTS="rollback.before-apply=sleep(3);wave.applied=sleep(1)"` makes the process sleep there, so a
test can SIGKILL it at exactly that step. Unset (always, in production) every failpoint is a no-op.
"""

from __future__ import annotations

import os
import re
import time

ENV = "RECONCILER_FAILPOINTS"
_TERM = re.compile(r"^\s*([a-z][a-z0-9.-]*)\s*=\s*sleep\((\d+(?:\.\d+)?)\)\s*$")


def parse(text: str) -> dict[str, float]:
    """Failpoint name -> seconds to sleep, from the variable's text (malformed terms are ignored)."""
    out = {}
    for term in text.split(";"):
        if (hit := _TERM.match(term)) is not None:
            out[hit.group(1)] = float(hit.group(2))
    return out


def failpoint(name: str) -> None:
    """Pause here when the environment asks for it (tests only)."""
    text = os.environ.get(ENV)
    if text and (seconds := parse(text).get(name)):
        time.sleep(seconds)
