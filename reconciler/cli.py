"""The `reconciler` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from reconciler import __version__
from reconciler.loader import DesiredStateError, LoadedState, load_dir
from reconciler.render import MANAGED_FILES, managed_files_for, render_file
from reconciler.render.files import UnknownNodeError
from reconciler.schema import desired_state_json_schema
from reconciler.source import describe_source

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="reconciler")
def main() -> None:
    """Declarative GitOps reconciler for GPU Slurm clusters."""


@main.command()
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
def validate(directory: str) -> None:
    """Validate a desired-state directory: schema, cross-references, hostlists."""
    loaded = load_or_exit(directory)
    state = loaded.state
    click.echo(
        f"{directory}: valid ({len(loaded.files)} files, {len(state.nodes)} inventory entries, "
        f"{len(state.cluster.partitions)} partitions)"
    )


@main.command()
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
@click.option("--node", required=True, help="Node to render for.")
@click.option("--file", "file_name", type=click.Choice(MANAGED_FILES), default=None,
              help="One file; default: every managed file of the node.")
def render(directory: str, node: str, file_name: str | None) -> None:
    """Print the managed files a node should have (exports/fstab: the managed block)."""
    loaded = load_or_exit(directory)
    source = describe_source(loaded.root, loaded.commit)
    try:
        names = [file_name] if file_name else managed_files_for(loaded.state, node)
        for name in names:
            if not file_name:
                click.echo(f"==> {name} <==")
            click.echo(render_file(loaded.state, node, name, source), nl=False)
    except UnknownNodeError:
        click.echo(f"error: node {node!r} is not in the inventory of {directory}", err=True)
        sys.exit(1)


@main.command()
def schema() -> None:
    """Print the JSON Schema of desired-state YAML files (for yaml-language-server)."""
    click.echo(json.dumps(desired_state_json_schema(), indent=2, sort_keys=False))


def _register_optional() -> None:
    """Attach command groups that live in other packages."""
    try:
        from checks.nccl.cli import nccl
    except ImportError:
        return
    main.add_command(nccl)


_register_optional()

if __name__ == "__main__":
    main()
