"""Failpoints for fault-injection tests (like etcd's gofail): a named point can be made to pause.

`RECONCILER_FAILPOINTS="rollback.before-apply=sleep(3);wave.applied=sleep(1)"` makes the process sleep there, so a
test can SIGKILL it at exactly that step; `fence.before-write=stop` makes the whole process SIGSTOP itself there,
the first time it gets there (a paused leader, resumed by the test with SIGCONT). Unset (always, in production)
every failpoint is a no-op.
"""

from __future__ import annotations

import os
import re
import signal
import time

ENV = "RECONCILER_FAILPOINTS"
_TERM = re.compile(r"^\s*([a-z][a-z0-9.-]*)\s*=\s*(?:sleep\((\d+(?:\.\d+)?)\)|(stop))\s*$")
STOP = -1.0  # the action `stop`
_stopped: set[str] = set()


def parse(text: str) -> dict[str, float]:
    """Failpoint name -> seconds to sleep (STOP: stop the process), from the variable's text (malformed terms are
    ignored)."""
    out = {}
    for term in text.split(";"):
        if (hit := _TERM.match(term)) is not None:
            out[hit.group(1)] = STOP if hit.group(3) else float(hit.group(2))
    return out


def failpoint(name: str) -> None:
    """Pause here when the environment asks for it (tests only)."""
    text = os.environ.get(ENV)
    if not text or not (seconds := parse(text).get(name)):
        return
    if seconds == STOP:
        if name not in _stopped:
            _stopped.add(name)
            os.kill(os.getpid(), signal.SIGSTOP)
        return
    time.sleep(seconds)
