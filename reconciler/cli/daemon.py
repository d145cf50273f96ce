"""`reconciler run`, `reconciler status`, `reconciler history`."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from reconciler.cli.support import exit_with_errors
from reconciler.daemon import operator as operator_view
from reconciler.daemon import promotion_view, upgrade_view, windows_view
from reconciler.daemon.config import DaemonConfig, load_config
from reconciler.desired.loader import DesiredStateError
from reconciler.rollout.journal import glance, refusal
from reconciler.rollout.rollback_text import FIRST_COMMIT, restore_headline, rollback_lines

DEFAULT_CONFIG = "/etc/reconciler/config.yaml"


def _config_or_exit(path: str) -> DaemonConfig:
    try:
        return load_config(path)
    except DesiredStateError as exc:
        exit_with_errors(exc, path)


@click.command()
@click.option("--config", "config_path", default=None, help=f"Daemon config file (default {DEFAULT_CONFIG}).")
@click.option("--watch", "watch_dir", default=None, type=click.Path(file_okay=False, exists=True),
              help="Local mode: reconcile this directory on every change (no Git, no config needed).")
@click.option("--mode", type=click.Choice(["enforce", "report"]), default=None,
              help="Override the config's mode.")
@click.option("--state-dir", default=None, help="Override the config's state directory.")
@click.option("--metrics-listen", default=None, help="host:port for /metrics, or 'off'.")
@click.option("--once", is_flag=True, help="Run one cycle and exit (exit 0 in sync/applied, 2 drift, 1 failure).")
def run(config_path: str | None, watch_dir: str | None, mode: str | None, state_dir: str | None,
        metrics_listen: str | None, once: bool) -> None:
    """Run the GitOps daemon: follow the repository (or --watch DIR) and reconcile continuously."""
    from reconciler.daemon.process import run_daemon

    if watch_dir and not config_path:
        data: dict[str, Any] = {"watch": str(Path(watch_dir).resolve()), "mode": mode or "enforce",
                                "state_dir": state_dir or str(Path(watch_dir).resolve().parent / ".reconciler-state"),
                                "metrics_listen": None, "age_identity": os.environ.get("RECONCILER_AGE_IDENTITY")}
        config = DaemonConfig.model_validate(data)
        path = None
    else:
        path = Path(config_path or DEFAULT_CONFIG)
        config = _config_or_exit(str(path))
        update: dict[str, Any] = {}
        if watch_dir:
            update |= {"watch": str(Path(watch_dir).resolve()), "repository": None, "signing": None}
        if mode:
            update["mode"] = mode
        if state_dir:
            update["state_dir"] = state_dir
        config = DaemonConfig.model_validate({**config.model_dump(), **update})
    if metrics_listen:
        config = config.model_copy(update={"metrics_listen": None if metrics_listen == "off" else metrics_listen})
    if config.age_identity is not None:  # an unreadable identity fails the start, naming the file (never a key)
        from reconciler.desired.agesecrets import AgeError, load_identities

        try:
            load_identities((path.parent if path else Path.cwd()) / config.age_identity)
        except AgeError as exc:
            click.echo(f"error: age_identity: {exc}", err=True)
            sys.exit(2)
    if config.notifications is not None:
        from reconciler.daemon.notify import NotifyConfigError, check_targets

        try:  # a missing url_env variable or url_file fails the start, naming it (never the URL)
            check_targets(config.notifications, path.parent if path else Path.cwd())
        except NotifyConfigError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
    if once:
        sys.exit(_run_once(config, path))
    sys.exit(run_daemon(config, path))


def _run_once(config: DaemonConfig, path: Path | None) -> int:
    import threading

    from reconciler.daemon import logs
    from reconciler.daemon.leadership import make_ha
    from reconciler.daemon.loop import Reconciler
    from reconciler.daemon.metrics import Metrics
    from reconciler.daemon.process import LockedError, acquire_lock

    logs.configure(config.log_format)
    try:
        lock = acquire_lock(config.state_path)
    except LockedError as exc:
        click.echo(f"error: {exc}", err=True)
        return 3
    store = open_store(config.state_path / "state.db")
    try:
        store.close_interrupted_runs()
        stop = threading.Event()
        reconciler = Reconciler(config, store, Metrics(), stop, config_dir=path.parent if path else Path.cwd())
        reconciler.role.ha = make_ha(reconciler, threading.Event())  # one of a pair: act only with the lease
        try:
            outcome = reconciler.cycle("once", force=True)
        finally:
            stop.set()
            if reconciler.ha is not None:
                reconciler.ha.release()
        if reconciler.notices.notifier is not None:
            reconciler.notices.notifier.close(timeout=10.0)
    finally:
        store.close()
        lock.close()
    return {"applied": 0, "in-sync": 0, "drift": 2}.get(outcome or "", 1)


def state_dir_of(config_path: str | None, state_dir: str | None) -> Path:
    """The daemon's state directory: STATE_DIR, else the config's (at CONFIG_PATH or the default)."""
    if state_dir:
        return Path(state_dir)
    return _config_or_exit(config_path or DEFAULT_CONFIG).state_path


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    ago = time.time() - ts
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    return f"{stamp} ({ago:.0f}s ago)" if ago < 3600 else stamp


# Which daemon a command reads or steers: its config, or its state directory straight (status, promote, upgrade...).
WHERE_OPTIONS = [
    click.option("--config", "config_path", default=None, help=f"Daemon config (default {DEFAULT_CONFIG})."),
    click.option("--state-dir", default=None, help="The daemon's state directory (instead of --config)."),
]
WHO_OPTION = click.option("--who", default=None, help="Who gives the command (default: user@host).")


def with_options(*options: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A decorator applying click OPTIONS in the order given (as if written top to bottom)."""
    def apply(func: Any) -> Any:
        for option in reversed(options):
            func = option(func)
        return func
    return apply


_state_options = with_options(*WHERE_OPTIONS,
                              click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text"))


def open_store(path: Path) -> Any:
    """The state database, or a clear error when SQLite cannot read it (no traceback)."""
    import sqlite3

    from reconciler.daemon.store import Store

    try:
        return Store(path)
    except sqlite3.DatabaseError as exc:
        raise click.ClickException(f"{path}: the state database is unreadable ({exc}); the daemon moves it aside "
                                   "and starts a fresh one at its next start") from None


def status_data(state_dir: Path) -> dict[str, Any]:
    """Everything `reconciler status` shows, as a dict."""
    from reconciler.daemon.store import DRAINED_KEY, JOURNAL_KEY, journal_where
    from reconciler.ha.role import HA_KEY

    if not (state_dir / "state.db").exists():
        raise click.ClickException(f"no daemon state in {state_dir} (has `reconciler run` started?)")
    store = open_store(state_dir / "state.db")
    try:
        last = store.last_run()
        data: dict[str, Any] = {
            "applied_commit": store.get("applied_commit"),
            "applied_at": store.get("applied_at"),
            "head": store.get("head_status") or {},
            "source_error": store.get("source_error"),
            "last_run": last.__dict__ if last else None,
            "drift": [d.__dict__ for d in store.current_drift()],
            "failing_checks": _failing_checks(store),
            "rollout_in_flight": store.get(JOURNAL_KEY),
            "last_rollout": next(iter(store.rollouts(1)), None),
            "rolled_back": store.rolled_back(),
            "state_recovered": store.get("state_recovered"),
            "ha": store.get(HA_KEY),
            "ha_takeover": store.get("ha_takeover"),
            "drained_nodes": store.get(DRAINED_KEY),
            "windows": windows_view.status_json(store.get(windows_view.WINDOWS_KEY), time.time()),
            "upgrade_operator": operator_view.shown(store.get(operator_view.KEY)),
        }
        promotion = promotion_view.load(store)
        if promotion["cluster"]:  # a cluster of a multi-cluster repository: its promotion too
            data.update(promotion)
    finally:
        store.close()
    data["upgrade"] = upgrade_view.status_json(data["rollout_in_flight"], data["last_rollout"],
                                               drained=data["drained_nodes"])
    data["rollout_journal_refused"] = refusal(data["rollout_in_flight"], journal_where(state_dir / "state.db"))
    return data


def _failing_checks(store: Any) -> list[dict[str, Any]]:
    try:
        from reconciler.checks import store as check_store
    except ImportError:
        return []
    out = []
    for result in check_store.latest(store.conn):
        if not result.ok:
            out.append({"check": result.check, "node": result.node, "message": result.message})
    return out


@click.command()
@_state_options
def status(config_path: str | None, state_dir: str | None, fmt: str) -> None:
    """Show the applied commit, the newest commit and its validity, the last run, drift and failing checks."""
    data = status_data(state_dir_of(config_path, state_dir))
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, default=str))
        return
    head = data["head"]
    if data.get("ha"):
        from reconciler.daemon.status_page import role_line

        click.echo(f"role:           {role_line(data['ha'])}")
    click.echo(f"applied commit: {(data['applied_commit'] or '-')[:12]}  at {_when(data['applied_at'])}")
    for line in promotion_view.status_lines(data):
        click.echo(line)
    if head:
        click.echo(f"newest commit:  {head['commit'][:12]}  {head['status']}")
        for error in head.get("errors", []):
            click.echo(f"  error: {error}")
    if data["source_error"]:
        click.echo(f"source: unreachable since {_when(data['source_error']['at'])}: {data['source_error']['error']}")
    last = data["last_run"]
    if last:
        click.echo(f"last run:       {last['outcome']}  {_when(last['started'])}  commit {(last['commit'] or '-')[:12]}"
                   f"  {last['changes']} change(s), {last['applied']} applied")
        if last["error"]:
            click.echo(f"  {last['error']}")
    drift = data["drift"]
    click.echo(f"drift:          {len(drift)} resource(s)" + (":" if drift else ""))
    for item in drift:
        kind = "pending commit" if item["pending_commit"] else "drift"
        click.echo(f"  {item['node']}  {item['driver']}  {item['action']}  {item['summary']}  ({kind})")
    checks = data["failing_checks"]
    click.echo(f"failing checks: {len(checks)}" + (":" if checks else ""))
    for check in checks:
        click.echo(f"  {check['node']}  {check['check']}: {check['message']}")
    said = operator_view.status_lines(data.get("upgrade_operator"))
    for line in windows_view.status_line(data.get("windows")) + said + rollout_lines(data):
        click.echo(line)
    if data.get("state_recovered"):
        recovered = data["state_recovered"]
        click.echo(f"state database: recovered {_when(recovered['at'])}: {recovered['detail']} (history, drift "
                   "and rolled-back marks from before are in the file moved aside)")


def rollout_lines(data: dict[str, Any]) -> list[str]:
    """The rollout part of `status`: the one in flight (wave n of m), the last one's timeline, rolled-back commits."""
    out = []
    flight = glance(data.get("rollout_in_flight"))
    if flight:
        index, sets = flight.wave, flight.nodesets
        out.append(f"rollout:        {str(flight.commit)[:12]} wave {index + 1} of {len(sets)} "
                   f"({flight.phase}) on {sets[index] if index < len(sets) and sets[index] is not None else '?'}")
        out += upgrade_view.status_lines(data.get("rollout_in_flight"), None)
    if data.get("rollout_journal_refused"):  # no rollout resumed or started until a human decides
        out.append(f"rollout journal REFUSED: {data['rollout_journal_refused']}")
    last = data.get("last_rollout")
    if last:
        out.append(f"last rollout:   {str(last.get('commit'))[:12]} {last.get('status')}: {last.get('reason')}")
        out += ["  " + line for line in timeline_lines(last)]
        rollback = last.get("rollback") or {}
        if rollback.get("before_image"):  # a first commit: no commit to name, only what was put back
            out.append(f"  {restore_headline(rollback)}")
            out += [f"    {line}" for line in rollback_lines(rollback, why=FIRST_COMMIT)]
        elif rollback.get("nodes") and not rollback.get("ok", True):  # what failed, never "rolled back"
            out += [f"  {line}" for line in rollback_lines(rollback)]
        elif rollback.get("nodes"):
            out.append(f"  rolled back {rollback['nodes']} to {str(rollback.get('to') or '-')[:12]}"
                       + (f"; resumed {', '.join(rollback['resumed'])}" if rollback.get("resumed") else ""))
        if not flight:  # the last upgrade's final states (a rollout in flight shows its own above)
            out += ["  " + line for line in upgrade_view.status_lines(None, last, drained=data.get("drained_nodes"))]
    for commit, why in sorted((data.get("rolled_back") or {}).items(), key=lambda kv: -float(kv[1].get("at", 0))):
        drained = "; ".join(f"{n}: {r}" for n, r in sorted((why.get("drained") or {}).items()))
        out.append(f"rolled back:    {commit[:12]} (not applied again; `reconciler rollout retry {commit[:12]}`): "
                   f"wave {why.get('wave')} gate {why.get('gate')} on {why.get('nodes') or '-'}: {why.get('message')}"
                   + (f" [drained: {drained}]" if drained else "")
                   + (f" [rollback FAILED: {'; '.join(why['errors'])}]" if why.get("status") == "rollback-failed"
                      and why.get("errors") else ""))
    return out


def timeline_lines(record: dict[str, Any]) -> list[str]:
    """One line per wave of a rollout record: nodes, apply time, each gate, the soak."""
    out = []
    for entry in record.get("timeline", []):
        start = float(entry.get("started", 0))
        applied = float(entry.get("applied_at", start)) - start
        parts = [f"wave {entry.get('wave')} ({entry.get('name')}) {entry.get('nodes')}: apply {applied:.1f}s"]
        for gate in entry.get("gates", []):
            verdict = "skipped" if gate.get("skipped") else ("ok" if gate.get("ok") else "FAILED")
            parts.append(f"{gate.get('gate')} {verdict} {float(gate.get('seconds', 0)):.1f}s")
        if entry.get("soak"):
            parts.append(f"soak {'ok' if entry['soak'].get('ok') else 'FAILED'} "
                         f"{float(entry['soak'].get('seconds', 0)):.1f}s")
        out.append("; ".join(parts))
    return out


@click.command()
@_state_options
@click.option("-n", "limit", type=int, default=20, show_default=True, help="How many runs.")
def history(config_path: str | None, state_dir: str | None, fmt: str, limit: int) -> None:
    """List the most recent reconcile runs."""

    from reconciler.daemon.peers import merge, peer_runs
    from reconciler.ha.role import HA_KEY, default_name

    path = state_dir_of(config_path, state_dir) / "state.db"
    if not path.exists():
        raise click.ClickException(f"no daemon state at {path}")
    store = open_store(path)
    try:
        runs = store.runs(limit)
        rollouts = {r["run_id"]: r for r in store.rollouts(limit)}
        role = store.get(HA_KEY) or {}
    finally:
        store.close()
    ha = _config_or_exit(config_path).ha if config_path else None
    remote, missing = peer_runs(ha.peers if ha else [], limit)
    pair = bool(role or ha)
    name = str(role.get("name") or (ha.name if ha else None) or default_name())
    merged = merge(name if pair else "", runs, remote, limit)
    for peer, why in sorted(missing.items()):
        click.echo(f"warning: runs of {peer} missing: {why}", err=True)
    if fmt == "json":
        click.echo(json.dumps([{**r.__dict__, "rollout": rollouts.get(r.run_id), **({"daemon": d} if pair else {})}
                               for d, r in merged], indent=2))
        return
    who = f"{'daemon':10}  " if pair else ""
    click.echo(f"{who}{'started':19}  {'secs':>6}  {'trigger':11}  {'mode':7}  {'commit':12}  {'outcome':11}  changes")
    for daemon, r in merged:
        secs = f"{r.ended - r.started:.1f}" if r.ended else "-"
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started))
        click.echo((f"{daemon[:10]:10}  " if pair else "")
                   + f"{stamp}  {secs:>6}  {r.trigger:11}  {r.mode:7}  {(r.commit or '-')[:12]:12}  {r.outcome:11}  "
                   f"{r.applied}/{r.changes}" + (f"  {r.error.splitlines()[0][:100]}" if r.error else ""))
        if r.run_id in rollouts:
            for line in timeline_lines(rollouts[r.run_id]):
                click.echo(f"{'':21}{line}")
            rollback = rollouts[r.run_id].get("rollback") or {}
            if rollback.get("before_image"):
                click.echo(f"{'':21}{restore_headline(rollback)}")
            elif rollback.get("nodes"):
                click.echo(f"{'':21}rollback of {rollback['nodes']} to {str(rollback.get('to') or '-')[:12]}: "
                           f"{'ok' if rollback.get('ok') else 'FAILED'}")


@click.group()
def rollout() -> None:
    """Progressive rollouts: what is in flight, and commits rolled back."""


@rollout.command(name="status")
@_state_options
def rollout_status(config_path: str | None, state_dir: str | None, fmt: str) -> None:
    """The rollout in flight, the last one with its timeline, and the commits rolled back."""
    data = status_data(state_dir_of(config_path, state_dir))
    keys = ("rollout_in_flight", "last_rollout", "rolled_back", "upgrade")
    if fmt == "json":
        click.echo(json.dumps({k: data[k] for k in keys}, indent=2, default=str))
        return
    for line in rollout_lines(data) or ["no rollout recorded"]:
        click.echo(line)


@rollout.command(name="retry")
@click.argument("commit")
@with_options(*WHERE_OPTIONS)
def rollout_retry(commit: str, config_path: str | None, state_dir: str | None) -> None:
    """Let the daemon try a rolled-back COMMIT (a prefix) again at its next cycle."""

    path = state_dir_of(config_path, state_dir) / "state.db"
    if not path.exists():
        raise click.ClickException(f"no daemon state at {path}")
    store = open_store(path)
    try:
        forgotten = store.retry_commit(commit)
    finally:
        store.close()
    if not forgotten:
        raise click.ClickException(f"no rolled-back commit starts with {commit!r}")
    click.echo(f"will retry {', '.join(c[:12] for c in forgotten)} at the daemon's next cycle")


COMMANDS = [run, status, history, rollout]
