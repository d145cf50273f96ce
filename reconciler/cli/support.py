"""What every command group shares: loading a desired-state directory or exiting with its errors.

Kept apart from `reconciler.cli.main` so that command groups in other packages (`reconciler.cli.check`) can
use it without importing the top-level command, which imports them.
"""

from __future__ import annotations

import re
import sys
from typing import NoReturn

import click

from reconciler.desired.clusters import load_state
from reconciler.desired.loader import DesiredStateError, LoadedState

DEFAULT_DIR = "desired-state"
CLUSTER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _cluster_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not CLUSTER_NAME.match(value):
        raise click.BadParameter(f"{value!r} is not a cluster name (a directory name under clusters/: letters, "
                                 "digits, '_', '.', '-')")
    return value


CLUSTER = click.option("--cluster", default=None, envvar="RECONCILER_CLUSTER", show_envvar=True,
                       callback=_cluster_name,
                       help="The cluster of a multi-cluster repository (clusters/NAME/ with its bases); "
                            "docs/clusters.md.")


def exit_with_errors(exc: DesiredStateError, where: str) -> NoReturn:
    """Print every error of a failed load, then how many and where, and exit 1."""
    for error in exc.errors:
        click.echo(f"error: {error}", err=True)
    click.echo(f"{len(exc.errors)} error(s) in {where}", err=True)
    sys.exit(1)


def load_or_exit(directory: str, cluster: str | None = None) -> LoadedState:
    """Load a desired-state directory (CLUSTER: one cluster of a multi-cluster repository), or print every error
    and exit 1."""
    try:
        return load_state(directory, cluster)
    except DesiredStateError as exc:
        exit_with_errors(exc, f"{directory}{f' (cluster {cluster})' if cluster else ''}; nothing was applied.")


def unlock_or_exit(loaded: LoadedState, directory: str, identity: str | None, required: bool) -> None:
    """Decrypt the state's age-encrypted files with the IDENTITY file (else RECONCILER_AGE_IDENTITY), or print
    why not (file:line) and exit 1. Without an identity: exit 1 when REQUIRED (apply), else leave them encrypted
    (a plan shows them as errors: not compared)."""
    from reconciler.desired.agesecrets import (
        AgeError,
        has_encrypted,
        identity_path,
        load_identities,
        require_identity,
        unlock,
    )

    if not has_encrypted(loaded.state):
        return
    path = identity_path(identity)
    try:
        if path is None:
            if required:
                require_identity(loaded)
            return
        try:
            identities = load_identities(path)
        except AgeError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        unlock(loaded, identities, path)
    except DesiredStateError as exc:
        exit_with_errors(exc, f"{directory}; nothing was applied.")
