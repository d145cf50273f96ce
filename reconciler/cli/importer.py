"""The `reconciler import` command."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from reconciler.cli.support import CLUSTER
from reconciler.desired.clusters import load_state
from reconciler.desired.layout import CLUSTERS_DIR
from reconciler.desired.loader import DesiredStateError, yaml_files
from reconciler.importer import AdoptOptions, ImportProblem, import_files
from reconciler.importer.packages import parse_patterns
from reconciler.importer.sources import LocalFiles, RemoteFiles, parse_ssh_url
from reconciler.model import SSHDefaults

PROGRESS_FROM = 5  # nodes: fewer are read too fast for a progress line to help


def _progress_line() -> Callable[[int, int], None] | None:
    """A `reading nodes: N/M` line rewritten in place on a terminal (None when stderr is not one)."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        if total >= PROGRESS_FROM:
            click.echo(f"\rreading nodes: {done}/{total}", err=True, nl=done == total)
    return show


@click.command(name="import")
@click.argument("source")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Desired-state directory to write (cluster.yaml, nodes.yaml, storage.yaml).")
@click.option("--config-dir", default="/etc/slurm", show_default=True, help="The node's Slurm config directory.")
@click.option("--slurm-version", default=None, help="Release family, e.g. 23.11 (ssh: read from the node).")
@click.option("--ssh-config", default=None, help="ssh_config file (as ssh.config in the desired state).")
@click.option("--known-hosts", default=None, help="known_hosts file; host keys are checked, never added silently.")
@click.option("--identity-file", default=None, help="Private key to log in with.")
@click.option("--proxy-jump", default=None, help="Bastion, [user@]host[:port].")
@click.option("--accept-new", is_flag=True, help="Trust a host key seen for the first time (accept-new).")
@click.option("--munge-key-file", default=None, type=click.Path(dir_okay=False, exists=True),
              help="ssh: a file on this machine holding the nodes' munge key; when it matches them, `munge:` is "
                   "written to use it (the key never goes into the output).")
@click.option("--image-dir", "image_dirs", multiple=True,
              help="ssh: a directory of enroot .sqsh images to adopt (repeatable).")
@click.option("--packages", "package_patterns", default=None, metavar="PATTERN,...",
              help="ssh: adopt the installed versions of the packages these names or globs match (apt or dnf), "
                   "e.g. 'nvidia-*,slurm*,enroot*' (packages.yaml).")
@click.option("--force", is_flag=True, help="Overwrite YAML files already in --out.")
@CLUSTER
def import_command(source: str, out_dir: str, config_dir: str, slurm_version: str | None, ssh_config: str | None,
                   known_hosts: str | None, identity_file: str | None, proxy_jump: str | None, accept_new: bool,
                   munge_key_file: str | None, image_dirs: tuple[str, ...], package_patterns: str | None,
                   force: bool, cluster: str | None) -> None:
    """Adopt an existing cluster: SOURCE is a directory of its Slurm files or ssh://[user@]host[:port].
    With --cluster NAME, --out is a multi-cluster repository and the files go to its clusters/NAME/."""
    repo = Path(out_dir)
    out = repo / CLUSTERS_DIR / cluster if cluster else repo
    if out.is_dir() and yaml_files(out) and not force:
        click.echo(f"error: {out} already holds YAML files; pass --force to overwrite them", err=True)
        sys.exit(1)
    try:
        target = parse_ssh_url(source)
        patterns = parse_patterns(package_patterns) if package_patterns is not None else []
    except ValueError as exc:  # a bad URL, or a PatternError
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if patterns and target is None:
        click.echo(f"error: --packages reads the installed packages of every node: {source} must be an ssh:// URL",
                   err=True)
        sys.exit(1)
    files: LocalFiles | RemoteFiles
    if target is None:
        if not Path(source).is_dir():
            click.echo(f"error: {source}: not a directory or ssh:// URL", err=True)
            sys.exit(1)
        files = LocalFiles(Path(source), config_dir)
    else:
        ssh = SSHDefaults(config=ssh_config, known_hosts=known_hosts, identity_file=identity_file,
                          proxy_jump=proxy_jump, host_key_policy="accept-new" if accept_new else "reject",
                          user=target.user or "root")
        try:
            files = RemoteFiles(target, config_dir, ssh, Path.cwd())
        except (ConnectionError, ValueError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
    options = AdoptOptions(munge_key_file=Path(munge_key_file).resolve() if munge_key_file else None,
                           image_dirs=list(image_dirs), progress=_progress_line(), packages=patterns)
    try:
        result = import_files(files, out, slurm_version, source, options)
    except (ImportProblem, ConnectionError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        click.echo("nothing was written.", err=True)
        sys.exit(1)
    finally:
        if isinstance(files, RemoteFiles):
            files.close()
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"wrote {', '.join(str(p) for p in result.files)}"
               + (f" and {len(result.sources)} adopted file(s) under {out / 'files'}" if result.sources else ""))
    try:
        load_state(repo, cluster)
    except DesiredStateError as exc:
        for error in exc.errors:
            click.echo(f"error: {error}", err=True)
        click.echo(f"{out}: the import does not validate yet ({len(exc.errors)} error(s)); fix them above",
                   err=True)
        sys.exit(1)
    then = f"{repo} --cluster {cluster}" if cluster else f"{out}"
    click.echo(f"{out}: valid; fill in the inventory's `host` and `ssh:` settings, then `reconciler plan {then}`")
