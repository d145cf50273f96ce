"""`reconciler upgrade pause|resume|skip|retry`: the operator's hand on a running daemon's upgrade.

Each command is a request written to the daemon's state database (found as `reconciler status` finds it), never a
signal: the daemon acts on it at its upgrade's next pass (daemon/operator.py, rollout/operator.py). Bad input (a
node not in the upgrade in flight, a retry of a node that did not fail, a skip of a node already started) is refused
with the reason and changes nothing.
"""

from __future__ import annotations

import getpass
import socket
import time

import click

from reconciler.cli.daemon import WHERE_OPTIONS, WHO_OPTION, open_store, state_dir_of, with_options

_options = with_options(*WHERE_OPTIONS, WHO_OPTION)


def _give(config_path: str | None, state_dir: str | None, who: str | None, op: str, node: str | None,
          reason: str) -> None:
    from reconciler.daemon.operator import Refused, give
    from reconciler.ha.role import HA_KEY
    from reconciler.rollout.operator import Request

    path = state_dir_of(config_path, state_dir) / "state.db"
    if not path.exists():
        raise click.ClickException(f"no daemon state at {path} (has `reconciler run` started?)")
    store = open_store(path)
    try:
        pair = store.get(HA_KEY) is not None
    finally:
        store.close()
    request = Request(op, node, who or f"{getpass.getuser()}@{socket.gethostname().split('.')[0]}", reason,
                      time.time())
    try:
        effect = give(path, request, pair=pair)
    except Refused as exc:
        raise click.ClickException(f"upgrade {op}{' ' + node if node else ''} refused: {exc} (nothing changed)") \
            from None
    click.echo(f"upgrade {op}{' ' + node if node else ''}: {effect}")


@click.group()
def upgrade() -> None:
    """Pause, resume, skip a node of, or retry a failed node of the daemon's upgrade in flight."""


@upgrade.command()
@_options
@click.option("--reason", default="", help="Why (shown by status).")
def pause(config_path: str | None, state_dir: str | None, who: str | None, reason: str) -> None:
    """No new node starts (nodes in flight finish) until `resume`; survives a daemon restart."""
    _give(config_path, state_dir, who, "pause", None, reason)


@upgrade.command()
@_options
def resume(config_path: str | None, state_dir: str | None, who: str | None) -> None:
    """Lift the pause."""
    _give(config_path, state_dir, who, "resume", None, "")


@upgrade.command()
@_options
@click.argument("node")
@click.option("--reason", default="", help="Why (shown by status).")
def skip(config_path: str | None, state_dir: str | None, who: str | None, node: str, reason: str) -> None:
    """Leave NODE (not yet started) on the old version, reported skipped."""
    _give(config_path, state_dir, who, "skip", node, reason)


@upgrade.command()
@_options
@click.argument("node")
@click.option("--reason", default="", help="Why (shown by status).")
def retry(config_path: str | None, state_dir: str | None, who: str | None, node: str, reason: str) -> None:
    """Put the failed NODE through the upgrade again (out of the failure count)."""
    _give(config_path, state_dir, who, "retry", node, reason)
