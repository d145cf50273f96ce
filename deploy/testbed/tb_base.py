"""What every testbed module shares: the one-line error, progress messages, running a command.

Standard library only, like the rest of deploy/testbed: it runs before the project is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


class TestbedError(Exception):
    """A failure worth a one-line message, not a traceback."""


VERBOSE = os.environ.get("TESTBED_VERBOSE") == "1"
_T0 = time.monotonic()


def log(msg: str) -> None:
    """Progress message on stderr (stdout is kept for results)."""
    print(f"testbed: {msg}", file=sys.stderr, flush=True)


def trace(msg: str) -> None:
    """Timestamped phase message when TESTBED_VERBOSE=1."""
    if VERBOSE:
        log(f"[{time.monotonic() - _T0:6.2f}s] {msg}")


def run(cmd: list[str], *, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing output; raise TestbedError with its stderr on failure."""
    proc = subprocess.run(cmd, input=input, text=True, capture_output=True)
    if check and proc.returncode != 0:
        raise TestbedError(f"{' '.join(cmd[:4])} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc
