"""The ``check`` command: ``reconciler check [DIR] [NAME] [--nodes HOSTLIST] [--state-db PATH] [--no-act]``."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import click

from reconciler.cli.support import CLUSTER

DEFAULT_DIR = "desired-state"


def open_db(path: Path) -> sqlite3.Connection:
    """Open (and create) a results database in WAL mode, as the daemon does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


@click.command("check")
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
@click.argument("name", required=False)
@click.option("--nodes", default=None, help="Only these nodes (Slurm hostlist, e.g. gpu[01-04]).")
@click.option("--state-db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="SQLite file to record results in (and read NCCL history from).")
@click.option("--no-act", is_flag=True, help="Drain, resume and reserve nothing; say what would be done.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--forks", type=int, default=None, help="Parallel SSH connections (default: ssh.forks).")
@click.option("--ack-xid", "ack_xid", default=None, metavar="HOSTLIST",
              help="First acknowledge the XIDs seen so far on these nodes (their GPUs were reset): they fail the "
                   "GPU check no more. Needs --state-db (the daemon's state.db).")
@CLUSTER
def check(directory: str, name: str | None, nodes: str | None, state_db: Path | None, no_act: bool, fmt: str,
          forks: int | None, ack_xid: str | None, cluster: str | None) -> None:
    """Run health checks now (all, or the one named): node checks over SSH, NCCL tests through srun.

    Prints one line per check and node, then the drains and resumes. Exit 0 when every check passed
    (skipped nodes included), 2 when something failed or could not be checked, 1 on a usage error.
    """
    from reconciler.checks.runner import UnknownCheckError, check_run
    from reconciler.cli.support import load_or_exit
    from reconciler.common import hostlist
    from reconciler.transport.ssh import SSHTransport

    loaded = load_or_exit(directory, cluster)
    try:
        only = set(hostlist.expand(nodes)) if nodes else None
    except ValueError as exc:
        click.echo(f"error: --nodes: {exc}", err=True)
        sys.exit(1)
    if ack_xid and state_db is None:
        click.echo("error: --ack-xid needs --state-db (where the XIDs seen are remembered)", err=True)
        sys.exit(1)
    conn = open_db(state_db) if state_db else None
    if ack_xid and conn is not None:
        from reconciler.checks.gpu import memory

        try:
            acked = memory.acknowledge(conn, hostlist.expand(ack_xid))
        except ValueError as exc:
            click.echo(f"error: --ack-xid: {exc}", err=True)
            sys.exit(1)
        for node, known in acked.items():
            upto = "-" if known.acked_until is None else f"{known.acked_until:.6f} s after boot"
            click.echo(f"  {node}: XIDs acknowledged up to {upto} (boot {known.boot or 'unknown'})", err=True)
    transport = SSHTransport(loaded.state.ssh, Path(loaded.root), forks=forks)
    log = (lambda line: click.echo(f"  {line}", err=True)) if fmt == "text" else (lambda _: None)
    try:
        outcome = check_run(loaded, transport, conn, [name] if name else None, only, log, act=not no_act)
    except UnknownCheckError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    finally:
        transport.close()
        if conn is not None:
            conn.close()
    if fmt == "json":
        doc = {"results": [r.model_dump(mode="json") for r in outcome.results],
               "actions": [{"node": a.node, "action": a.kind, "check": a.check, "reason": a.reason, "note": a.note,
                            "done": a.done, "error": a.error} for a in outcome.actions]}
        click.echo(json.dumps(doc, indent=2))
    else:
        for result in outcome.results:
            click.echo(result.line())
        for action in outcome.actions:
            click.echo(("would " if no_act else "") + action.line())
        failed = sum(not r.ok for r in outcome.results)
        skipped = sum(r.skipped for r in outcome.results)
        click.echo(f"{len(outcome.results)} result(s): {failed} failed, {skipped} skipped")
    sys.exit(0 if outcome.ok else 2)
