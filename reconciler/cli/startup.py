"""How the `reconciler` command starts: fewer costs paid before the first SSH packet leaves.

A cold `reconciler plan` spends most of its client time importing pydantic, paramiko and our models. Two costs
there are not the work itself: pydantic looking for plugins (a scan of every installed package's entry points)
and the garbage collector walking the ever-growing heap of new classes and schemas again and again while modules
load, then again during the run. `begin` (before any import) turns both off; `settle` (after the imports) moves
everything loaded into the collector's permanent generation (`gc.freeze`) and turns collection back on, so later
collections look only at what the run itself allocates. Library users who import `reconciler.cli.main` are not
affected: only the console script and `python -m reconciler.cli` call `begin`.

`begin` also raises the open-files soft limit to the hard one: every node's connection holds a socket (and, with a
ProxyCommand, two pipes and a process), so 1,000 nodes need more than the usual soft limit of 1,024.
"""

from __future__ import annotations

import gc
import os

_began = False


def begin() -> None:
    """Before the imports: no pydantic plugin discovery (unless asked for), no collection while modules load."""
    global _began
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    raise_open_files_limit()
    if gc.isenabled():
        gc.disable()
        _began = True


def raise_open_files_limit(most: int = 1 << 20) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (at most MOST); the soft limit in force after."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = most if hard == resource.RLIM_INFINITY else min(hard, most)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


def settle() -> None:
    """After (more) imports: freeze what is loaded out of the collector's sight; collection back on."""
    if _began:
        gc.freeze()
        gc.enable()
