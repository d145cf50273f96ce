"""How the `reconciler` command starts: fewer costs paid before the first SSH packet leaves.

A cold `reconciler plan` spends most of its client time importing pydantic, paramiko and our models. Two costs
there are not the work itself: pydantic looking for plugins (a scan of every installed package's entry points)
and the garbage collector walking the ever-growing heap of new classes and schemas again and again while modules
load, then again during the run. `begin` (before any import) turns both off; `settle` (after the imports) moves
everything loaded into the collector's permanent generation (`gc.freeze`) and turns collection back on, so later
collections look only at what the run itself allocates. Library users who import `reconciler.cli` are not
affected: only the console script and `python -m reconciler.cli` call `begin`.
"""

from __future__ import annotations

import gc
import os

_began = False


def begin() -> None:
    """Before the imports: no pydantic plugin discovery (unless asked for), no collection while modules load."""
    global _began
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if gc.isenabled():
        gc.disable()
        _began = True


def settle() -> None:
    """After (more) imports: freeze what is loaded out of the collector's sight; collection back on."""
    if _began:
        gc.freeze()
        gc.enable()


def main() -> None:
    """The `reconciler` console script."""
    begin()
    from reconciler.cli import main as cli_main

    cli_main()
