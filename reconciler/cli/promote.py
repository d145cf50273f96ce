"""`reconciler promote approve|hold|release|hotfix|back`: the operator's hand on a cluster daemon's promotion.

Each command is written to the daemon's state database (found as `reconciler status` finds it), never a signal:
the daemon acts at its next cycle (daemon/promotion_operator.py, promotion_steer.py). `--cluster` must name the
cluster that daemon reconciles: a command for production given to staging's daemon is refused. A commit is named
by a hash (or a prefix) the daemon's own clone knows; bad input is refused with the reason and changes nothing.
"""

from __future__ import annotations

import getpass
import socket
import subprocess
from pathlib import Path

import click

from reconciler.cli.daemon import WHERE_OPTIONS, WHO_OPTION, state_dir_of, with_options

_options = with_options(
    click.option("--cluster", required=True, help="The cluster the daemon reconciles (checked: a mistyped or "
                 "another cluster's daemon is refused)."),
    *WHERE_OPTIONS, WHO_OPTION)


def resolve(clone: Path, commit: str) -> str:
    """COMMIT's full hash in the daemon's clone at CLONE; ClickException when it is not a commit there."""
    if not commit or len(commit) < 7 or any(c not in "0123456789abcdefABCDEF" for c in commit):
        raise click.ClickException(f"{commit!r} is not a commit hash (at least 7 hex digits)")
    if not (clone / ".git").exists() and not (clone / "HEAD").exists():
        raise click.ClickException(f"the daemon has no clone at {clone} yet: it cannot tell which commit "
                                   f"{commit} is (nothing changed)")
    found = subprocess.run(["git", "-C", str(clone), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
                           capture_output=True, text=True, timeout=60)
    if found.returncode != 0:
        raise click.ClickException(f"{commit} is not a commit of the daemon's clone (has it fetched it yet? it "
                                   "fetches every poll interval) (nothing changed)")
    return found.stdout.strip()


def _give(op: str, cluster: str, config_path: str | None, state_dir: str | None, who: str | None,
          commit: str | None, reason: str) -> None:
    from reconciler.daemon.promotion_operator import Refused, give, request

    directory = state_dir_of(config_path, state_dir)
    path = directory / "state.db"
    if not path.exists():
        raise click.ClickException(f"no daemon state at {path} (has `reconciler run` started?)")
    full = resolve(directory / "repo", commit) if commit is not None else None
    req = request(op, full, who or f"{getpass.getuser()}@{socket.gethostname().split('.')[0]}", reason)
    what = f"promote {op}{' ' + full[:12] if full else ''} --cluster {cluster}"
    try:
        effect = give(path, req, cluster)
    except Refused as exc:
        raise click.ClickException(f"{what} refused: {exc} (nothing changed)") from None
    click.echo(f"{what}: {effect}")


@click.group()
def promote() -> None:
    """Approve a commit for, hold, release, hotfix or send back a cluster's promotion."""


@promote.command()
@_options
@click.argument("commit")
@click.option("--reason", default="", help="Why (recorded and shown by status).")
def approve(cluster: str, config_path: str | None, state_dir: str | None, who: str | None, commit: str,
            reason: str) -> None:
    """Approve COMMIT for CLUSTER (`approval: required`): applied once its upstream verdict holds too."""
    _give("approve", cluster, config_path, state_dir, who, commit, reason)


@promote.command()
@_options
@click.option("--reason", default="", help="Why (recorded and shown by status).")
def hold(cluster: str, config_path: str | None, state_dir: str | None, who: str | None, reason: str) -> None:
    """Apply nothing new on CLUSTER until `release` (drift is still healed); survives a daemon restart."""
    _give("hold", cluster, config_path, state_dir, who, None, reason)


@promote.command()
@_options
def release(cluster: str, config_path: str | None, state_dir: str | None, who: str | None) -> None:
    """Lift CLUSTER's hold (a human's, one after a rollback, or one after `back`)."""
    _give("release", cluster, config_path, state_dir, who, None, "")


@promote.command()
@_options
@click.argument("commit")
@click.option("--reason", required=True, help="Why this cannot wait for the upstream (recorded and shown).")
def hotfix(cluster: str, config_path: str | None, state_dir: str | None, who: str | None, commit: str,
           reason: str) -> None:
    """Apply COMMIT of CLUSTER's branch now, through its rollout and gates, without the upstream's verdict or soak."""
    _give("hotfix", cluster, config_path, state_dir, who, commit, reason)


@promote.command()
@_options
@click.option("--reason", default="", help="Why (recorded and shown by status).")
def back(cluster: str, config_path: str | None, state_dir: str | None, who: str | None, reason: str) -> None:
    """Return CLUSTER to the commit it applied before (its rollout and gates, no soak), then hold it."""
    _give("back", cluster, config_path, state_dir, who, None, reason)
