"""LBNL Node Health Check: run the site's own `nhc` rules and report its verdict as one item.

NHC is told not to mark the node itself (`MARK_OFFLINE=0`) and to stay in the foreground (`DETACHED_MODE=0`):
the reconciler drains, with its own reason, and never touches a drain NHC set on its own schedule.
"""

from __future__ import annotations

import re
import shlex

NHC_MISSING = 127
_ERROR = re.compile(r"ERROR:\s*(?:nhc:\s*)?(?:Health check failed:\s*)?(?P<what>.*)$")


def nhc_command(command: str, timeout: int) -> str:
    """Shell text running NHC in the foreground without marking the node; 127 when it is not installed."""
    binary = shlex.split(command)[0] if command.strip() else "nhc"
    return (f"if command -v {shlex.quote(binary)} >/dev/null 2>&1; then "
            f"timeout -k 5 {timeout + 5} {command} MARK_OFFLINE=0 DETACHED_MODE=0 TIMEOUT={timeout}; "
            f"else echo {shlex.quote(binary + ': command not found')}; (exit {NHC_MISSING}); fi")


def nhc_failure(output: str) -> str | None:
    """What NHC says failed: its first failed check (`check_fs_mount: /home not mounted`, `(and 2 more)`)."""
    failed, last = [], None
    for line in output.splitlines():
        match = _ERROR.search(line)
        if match:
            what = re.sub(r"\s{2,}", " ", match.group("what").strip())
            last = what
            if "Health check failed:" in line:
                failed.append(what)
    if failed:
        return failed[0] + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else "")
    return last
