"""What every command group shares: loading a desired-state directory or exiting with its errors.

Kept apart from `reconciler.cli` so that command groups in other packages (`reconciler.checks.cli`) can
use it without importing the top-level command, which imports them.
"""

from __future__ import annotations

import sys

import click

from reconciler.loader import DesiredStateError, LoadedState, load_dir

DEFAULT_DIR = "desired-state"


def load_or_exit(directory: str) -> LoadedState:
    """Load a desired-state directory, or print every error and exit 1."""
    try:
        return load_dir(directory)
    except DesiredStateError as exc:
        for error in exc.errors:
            click.echo(f"error: {error}", err=True)
        click.echo(f"{len(exc.errors)} error(s) in {directory}; nothing was applied.", err=True)
        sys.exit(1)
