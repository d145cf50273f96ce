"""A pair's shared history: each daemon serves its runs at /runs.json; history and status page merge the peer's."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from reconciler.daemon.store import RunRecord, Store

PEER_TIMEOUT = 2.0  # seconds: a peer that does not answer is named, never waited for


def runs_json(db: Path, daemon: str, limit: int) -> str:
    """This daemon's last LIMIT runs as JSON, each marked with its daemon's name."""
    if not db.exists():
        return "[]"
    store = Store.open_read_only(db)
    try:
        return json.dumps([{**asdict(r), "daemon": daemon} for r in store.runs(limit)])
    finally:
        store.close()


def peer_runs(peers: Iterable[Any], limit: int) -> tuple[list[tuple[str, RunRecord]], dict[str, str]]:
    """The peers' runs (daemon, run) and, per peer that did not answer, why."""
    names = {f.name for f in fields(RunRecord)}
    runs: list[tuple[str, RunRecord]] = []
    errors: dict[str, str] = {}
    for peer in peers:
        try:
            with urllib.request.urlopen(f"{peer.url}/runs.json?limit={limit}", timeout=PEER_TIMEOUT) as answer:
                items = json.loads(answer.read(4 << 20))
            for item in items:
                if isinstance(item, dict):
                    values: dict[str, Any] = {k: item.get(k) for k in names}
                    runs.append((str(item.get("daemon") or peer.name), RunRecord(**values)))
        except (OSError, ValueError, TypeError) as exc:
            errors[peer.name] = f"{type(exc).__name__}: {exc}"[:200]
    return runs, errors


def merge(local: str, runs: list[RunRecord], remote: list[tuple[str, RunRecord]],
          limit: int) -> list[tuple[str, RunRecord]]:
    """Both daemons' runs, newest first, each with its daemon's name."""
    both = [(local, r) for r in runs] + remote
    return sorted(both, key=lambda item: -float(item[1].started or 0))[:limit]
