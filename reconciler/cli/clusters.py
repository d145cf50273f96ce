"""Commands of multi-cluster repositories: `validate` of every cluster, and `explain` (where a value comes from)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from reconciler.cli.support import CLUSTER, DEFAULT_DIR, exit_with_errors, load_or_exit
from reconciler.desired.clusters import (
    bad_name,
    cluster_names,
    load_cluster,
    read_promotion,
    shared_cluster_names,
    unused_bases,
)
from reconciler.desired.loader import DesiredStateError, LoadedState
from reconciler.model.bounds import human


def validate_clusters(directory: str, only: str | None) -> NoReturn:
    """Validate every cluster of a multi-cluster repository (or ONLY), then promotion.yaml; one line per cluster,
    every error named by its cluster; exit 1 when any fails."""
    from reconciler.desired.risks import risk_warnings

    names = cluster_names(directory)
    if only is not None and only not in names:
        click.echo(f"error: no cluster {only!r} in {directory} (clusters: {', '.join(names) or 'none'})", err=True)
        sys.exit(1)
    if not names:
        click.echo(f"error: {directory}/clusters/ holds no cluster directory", err=True)
        sys.exit(1)
    failed: list[str] = []
    results: dict[str, LoadedState | DesiredStateError] = {}
    for name in [only] if only else names:
        if (bad := bad_name(name)) is not None:
            failed.append(ascii(name)[1:-1])
            click.echo(f"error: {bad}", err=True)
            continue
        try:
            results[name] = load_cluster(directory, name)
        except DesiredStateError as exc:
            results[name] = exc
    if only is None:  # a name shared with a cluster not validated now is not known here
        for base in unused_bases(Path(directory)):
            click.echo(f"warning: bases/{ascii(base)[1:-1]}/ is in no cluster's overlay.yaml: nothing reads it",
                       err=True)
        loaded_ok = {n: r for n, r in results.items() if isinstance(r, LoadedState)}
        for name, error in shared_cluster_names(loaded_ok):
            results[name] = DesiredStateError([error])
    for name, loaded in results.items():
        if isinstance(loaded, DesiredStateError):
            failed.append(name)
            for error in loaded.errors:
                click.echo(f"error: [cluster {name}] {error}", err=True)
            click.echo(f"{directory} [cluster {name}]: {len(loaded.errors)} error(s)", err=True)
            continue
        for warning in risk_warnings(loaded):
            click.echo(f"warning: [cluster {name}] {warning}", err=True)
        state = loaded.state
        click.echo(f"{directory} [cluster {name}]: valid ({len(loaded.files)} files, {len(state.nodes)} inventory "
                   f"entries, {len(state.cluster.partitions)} partitions)")
    try:
        rules = read_promotion(directory, names)
    except DesiredStateError as exc:
        failed.append("promotion.yaml")
        for error in exc.errors:
            click.echo(f"error: {error}", err=True)
    else:
        for name, rule in sorted(rules.items()):
            click.echo(f"{directory}: promotion: {name} after {rule.after_text}, soak "
                       f"{human(int(rule.soak.total_seconds()))}")
    if failed:
        click.echo(f"{directory}: not valid: {', '.join(failed)}", err=True)
        sys.exit(1)
    sys.exit(0)


def _shown(value: Any) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) else value


@click.command()
@click.argument("key")
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
@CLUSTER
def explain(key: str, directory: str, cluster: str | None) -> None:
    """Print the final value of KEY (dotted, list items by name, key or index: cluster.partitions.gpu.MaxTime), the
    file:line that set it, the values it overrode (earlier layers), with theirs, and the items a layer removed."""
    from reconciler.desired.explain import ExplainError
    from reconciler.desired.explain import explain as explain_key

    loaded = load_or_exit(directory, cluster)
    try:
        found = explain_key(loaded, key)
    except ExplainError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if found.gone is not None:
        gone = found.gone
        click.echo(f"{key}: removed by {gone.by} ({gone.field} {gone.key}; set at {gone.was})")
        return
    click.echo(f"{key} = {_shown(found.value)}")
    if found.winner is None:
        near = f" (the enclosing key is at {found.inherited_from})" if found.inherited_from else ""
        click.echo(f"  not set in any file: the default{near}")
        return
    click.echo(f"  set at {found.winner}")
    for location, value in reversed(found.overridden):
        click.echo(f"  overrides {_shown(value)} at {location}")
    for removal in found.removed:
        click.echo(f"  removed {removal.key} ({removal.field}; set at {removal.was}) by {removal.by}")


__all__ = ["exit_with_errors", "explain", "validate_clusters"]
