"""The `reconciler` command line."""

from __future__ import annotations

import json
import sys
from typing import Any

from reconciler.cli import startup
from reconciler.drivers import all_drivers

if __name__ == "__main__":  # `python -m reconciler.cli`: start as the console script does
    startup.begin()

import click  # noqa: E402 - after startup.begin

from reconciler import __version__
from reconciler.cli.support import CLUSTER, DEFAULT_DIR, load_or_exit, unlock_or_exit
from reconciler.common.hostlist import HostlistError, expand
from reconciler.desired.source import describe_source
from reconciler.model.json_schema import desired_state_json_schema
from reconciler.render import MANAGED_FILES, managed_files_for, render_file
from reconciler.render.files import UnknownNodeError


class _LazyGroup(click.Group):
    """The command group; the daemon, import and check commands are attached on first need (`plan` and `apply`
    do not pay for importing them: about 80 ms of a cold plan's start)."""

    registered = False

    def _register(self) -> None:
        if not _LazyGroup.registered:
            _LazyGroup.registered = True
            _register_daemon()
            _register_checks()
            _register_secrets()
            _register_clusters()

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """A command by name; the lazily attached ones are imported when the name is not one of ours."""
        found = super().get_command(ctx, cmd_name)
        if found is None:
            self._register()
            found = super().get_command(ctx, cmd_name)
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name (attaches the lazy ones first)."""
        self._register()
        return super().list_commands(ctx)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="reconciler")
def main() -> None:
    """Declarative GitOps reconciler for GPU Slurm clusters."""
    startup.settle()


@main.command()
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
@CLUSTER
def validate(directory: str, cluster: str | None) -> None:
    """Validate a desired-state directory: schema, cross-references, hostlists (a multi-cluster repository: every
    cluster, or the one named, and promotion.yaml)."""
    from reconciler.desired.layout import is_multi_cluster
    from reconciler.desired.risks import risk_warnings

    if is_multi_cluster(directory):
        from reconciler.cli.clusters import validate_clusters

        validate_clusters(directory, cluster)  # exits
    loaded = load_or_exit(directory, cluster)
    state = loaded.state
    for warning in risk_warnings(loaded):
        click.echo(f"warning: {warning}", err=True)
    click.echo(
        f"{directory}: valid ({len(loaded.files)} files, {len(state.nodes)} inventory entries, "
        f"{len(state.cluster.partitions)} partitions)"
    )


@main.command()
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
@click.option("--node", required=True, help="Node to render for.")
@click.option("--file", "file_name", type=click.Choice(MANAGED_FILES), default=None,
              help="One file; default: every managed file of the node.")
@CLUSTER
def render(directory: str, node: str, file_name: str | None, cluster: str | None) -> None:
    """Print the managed files a node should have (exports/fstab: the managed block)."""
    loaded = load_or_exit(directory, cluster)
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


def _open(directory: str, limit: str | None, forks: int | None,  # type: ignore[no-untyped-def]
          age_identity: str | None = None, need_secrets: bool = False, cluster: str | None = None):
    from reconciler.engine.run import open_reconcile

    loaded = load_or_exit(directory, cluster)
    unlock_or_exit(loaded, directory, age_identity, need_secrets)
    startup.settle()
    try:
        return open_reconcile(loaded, all_drivers(), limit=limit, forks=forks)
    except HostlistError as exc:
        click.echo(f"error: --limit: {exc}", err=True)
        sys.exit(1)


LIMIT = click.option("--limit", default=None, help="Only these nodes (Slurm hostlist, e.g. gpu[01-04]).")
FORKS = click.option("--forks", type=int, default=None, help="Parallel SSH connections (default: ssh.forks).")
AGE_IDENTITY = click.option("--age-identity", default=None, envvar="RECONCILER_AGE_IDENTITY", show_envvar=True,
                            type=click.Path(dir_okay=False),
                            help="age identity file that decrypts the desired state's .age files (age-keygen or "
                                 "`reconciler secret keygen` output, or an OpenSSH ed25519 key).")


@main.command()
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
@click.option("--node", "limit", default=None, help="Only these nodes (hostlist).")
@FORKS
@CLUSTER
def facts(directory: str, limit: str | None, forks: int | None, cluster: str | None) -> None:
    """Gather and print the facts of every node (one SSH round trip per node), as JSON."""
    run = _open(directory, limit, forks, cluster=cluster)
    try:
        run.gather()
    finally:
        run.close()
    hide_content = {"nodes": {"__all__": {"files": {"__all__": {"content"}}}}}
    click.echo(run.ctx.facts.model_dump_json(indent=2, exclude=hide_content))


@main.command()
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text")
@LIMIT
@click.option("--node", default=None, help="One node's full, unfolded plan (a one-node --limit with --per-node).")
@click.option("--per-node", is_flag=True,
              help="One entry per node and resource, each with its own diff, instead of identical changes "
                   "folded by node set (JSON: the `changes` list of Change objects with a `node` each).")
@FORKS
@AGE_IDENTITY
@CLUSTER
def plan(directory: str, fmt: str, limit: str | None, node: str | None, per_node: bool, forks: int | None,
         age_identity: str | None, cluster: str | None) -> None:
    """Show what apply would change. Exit 0: no changes, 2: changes, 1: error or a node not reached (its state is
    unknown), like terraform -detailed-exitcode.

    Identical changes on many nodes are shown once, under their folded node set (`gpu[001-512,514-1024]`).
    """
    from reconciler.engine.report import render_json, render_markdown, render_text

    if node is not None:
        if limit is not None:
            click.echo("error: --node and --limit: give one of them", err=True)
            sys.exit(1)
        try:
            names = expand(node)
        except HostlistError as exc:
            click.echo(f"error: --node: {exc}", err=True)
            sys.exit(1)
        if len(names) != 1:
            click.echo(f"error: --node takes one node name, not {node!r} (use --limit for a hostlist)", err=True)
            sys.exit(1)
        limit, per_node = names[0], True
    run = _open(directory, limit, forks, age_identity, cluster=cluster)
    if node is not None and limit not in run.ctx.specs:
        run.close()
        click.echo(f"error: node {node!r} is not in the inventory of {directory}", err=True)
        sys.exit(1)
    try:
        run.gather()
        result = run.plan()
    finally:
        run.close()
    from reconciler.drivers.slurm_workload import SlurmWorkload
    from reconciler.rollout.preview import annotate

    annotate(run.ctx, result, SlurmWorkload())
    if fmt == "json":
        click.echo(render_json(result, per_node=per_node), nl=False)
    elif fmt == "markdown":
        click.echo(render_markdown(result, per_node=per_node), nl=False)
    else:
        click.echo(render_text(result, colour=sys.stdout.isatty(), per_node=per_node), nl=False)
    if result.errors or result.unreachable:  # an unreached node's state is unknown: not "no changes"
        sys.exit(1)
    sys.exit(2 if result.has_changes else 0)


@main.command()
@click.argument("directory", default=DEFAULT_DIR, type=click.Path(file_okay=False))
@click.option("--yes", is_flag=True, help="Apply without asking.")
@LIMIT
@FORKS
@click.option("--max-unavailable", type=int, default=1, show_default=True, help="slurmd restarts at a time.")
@click.option("--max-fail-percent", type=float, default=50.0, show_default=True,
              help="Stop the rollout when more nodes than this have failed.")
@click.option("--drain-timeout", type=float, default=3600.0, show_default=True,
              help="Seconds to wait for running jobs on a drained node before giving up.")
@click.option("--waves", "waves_mode", type=click.Choice(["desired", "all"]), default="desired", show_default=True,
              help="desired: the desired state's rollout (canary waves and gates); all: every node at once, "
                   "no gates.")
@click.option("--previous", default=None, type=click.Path(file_okay=False, exists=True),
              help="The desired state the cluster had before (e.g. a checkout of the last applied commit): "
                   "a failed gate rolls the waves back to it. Without it a failed gate stops the rollout.")
@click.option("--allow", "allow", multiple=True, type=click.Choice(["reboot", "driver-reload"]),
              help="Also apply the changes that need this (a package or kernel change that takes effect only "
                   "after a reboot or a driver reload). Without it they are held: shown, not applied. A module "
                   "option's change is the reload itself; a reboot is never done.")
@AGE_IDENTITY
@CLUSTER
def apply(directory: str, yes: bool, limit: str | None, forks: int | None, max_unavailable: int,
          max_fail_percent: float, drain_timeout: float, waves_mode: str, previous: str | None,
          allow: tuple[str, ...], age_identity: str | None, cluster: str | None) -> None:
    """Show the plan, ask, then apply it, wave by wave as the desired state's `rollout:` says (each wave gated;
    a failed gate rolls back to --previous). Exit 0 when everything applied, 1 on any failure, rollback or
    unreachable node (the reachable nodes are still applied), 2 when changes were held (see --allow)."""
    from reconciler.drivers.slurm_workload import SlurmWorkload
    from reconciler.engine.apply import ApplyOptions
    from reconciler.engine.report import render_text
    from reconciler.rollout.preview import annotate

    old = None
    if previous:
        from reconciler.desired.layout import is_multi_cluster

        old = load_or_exit(previous, cluster if is_multi_cluster(previous) else None)
    if old is not None and previous is not None:
        unlock_or_exit(old, previous, age_identity, True)
    run = _open(directory, limit, forks, age_identity, need_secrets=True, cluster=cluster)
    try:
        run.gather()
        result = run.plan()
        if waves_mode == "all":
            run.ctx.state.rollout.waves = "all"
        waves = annotate(run.ctx, result, SlurmWorkload())
        click.echo(render_text(result, colour=sys.stdout.isatty()), nl=False)
        if not result.has_changes:
            sys.exit(1 if result.errors or result.unreachable else 0)
        from reconciler.rollout.windows import closed

        shut = closed(run.ctx.state.rollout.windows, run.ctx.state.rollout.windows_apply_to)
        if shut is not None:
            click.echo("Nothing applied: outside the maintenance windows (rollout.windows_apply_to: all); "
                       f"{shut.text()}.", err=True)
            sys.exit(1)
        if not yes and not click.confirm("Apply these changes?", default=False):
            click.echo("Nothing applied.")
            sys.exit(1)
        options = ApplyOptions(max_unavailable=max_unavailable, max_fail_percent=max_fail_percent,
                               drain_timeout=drain_timeout, allow=frozenset(allow))
        upgrade = run.ctx.state.rollout.upgrade is not None and any(c.needs for c in result.changing())
        if len(waves.waves) > 1 or any(w.gated for w in waves.waves) or upgrade:  # upgrade: reboots node by node
            _apply_in_waves(run, result, old, options)  # exits
        outcome = run.apply(result, options, log=lambda line: click.echo(f"  {line}"))
    finally:
        run.close()
    click.echo(f"\napplied {len(outcome.applied)} change(s); {len(outcome.steps)} follow-up step(s)")
    for node, failures in sorted(outcome.failures.items()):
        for failure in failures:
            click.echo(f"FAILED {node}: {failure}", err=True)
    if outcome.stopped:
        click.echo(f"STOPPED: {outcome.stopped}", err=True)
    _report_held(outcome.held)
    if not (outcome.ok and not result.errors and not result.unreachable):
        sys.exit(1)
    sys.exit(2 if outcome.held else 0)


def _report_held(held: list[Any]) -> None:
    """Name the changes held for a consequence the caller did not allow (apply --allow)."""
    from reconciler.engine.apply import held_reason
    from reconciler.engine.fold import fold_names

    groups: dict[tuple[str, str], list[str]] = {}
    for change in held:
        groups.setdefault((change.summary or change.resource, held_reason(change)), []).append(change.node)
    for (summary, why), nodes in groups.items():
        click.echo(f"HELD {fold_names(nodes)}: {summary} ({why})", err=True)


def _apply_in_waves(run: Any, plan: Any, old: Any, options: Any) -> None:
    """`apply` with waves and gates (reconciler/rollout); prints the timeline and exits."""
    from reconciler.checks.rollout_site import slurm_site
    from reconciler.cli.daemon import timeline_lines
    from reconciler.rollout.journal import MemoryJournal
    from reconciler.rollout.rollback_text import rollback_lines
    from reconciler.rollout.runner import RolloutRunner

    runner = RolloutRunner(run.ctx.loaded, old, run.transport, options, MemoryJournal(), slurm_site(),
                           log=lambda line: click.echo(f"  {line}"))
    outcome = runner.run(plan)  # the caller closes the transport
    click.echo(f"\nrollout {outcome.status}: {outcome.reason}")
    for line in timeline_lines(outcome.as_dict()):
        click.echo(f"  {line}")
    for line in rollback_lines(outcome.rollback or {}):
        click.echo(line)
    for node, failures in sorted(outcome.failures.items()):
        for failure in failures:
            click.echo(f"FAILED {node}: {failure}", err=True)
    if outcome.status == "complete":  # a rollback's own lines already named the nodes it left drained
        for node, why in sorted(outcome.upgrade_failed.items()):
            click.echo(f"FAILED {node}: upgrade: {why} (left drained for a human)", err=True)
    _report_held(outcome.held)
    if not (outcome.status == "complete" and not plan.errors and not plan.unreachable
            and not outcome.upgrade_failed):
        sys.exit(1)
    sys.exit(2 if outcome.held else 0)


def _register_daemon() -> None:
    """Attach the daemon commands (run, status, history, upgrade)."""
    from reconciler.cli.daemon import COMMANDS
    from reconciler.cli.gpus import gpus
    from reconciler.cli.importer import import_command
    from reconciler.cli.promote import promote
    from reconciler.cli.upgrade import upgrade

    for command in COMMANDS:
        main.add_command(command)
    main.add_command(import_command)
    main.add_command(upgrade)  # the operator's pause / resume / skip / retry of the daemon's upgrade
    main.add_command(gpus)  # the fleet's GPUs worst first, RMA candidates, one GPU's history
    main.add_command(promote)  # the operator's approve / hold / release / hotfix / back of a cluster's promotion


def _register_checks() -> None:
    """Attach the health-check command groups."""
    from reconciler.cli.check import check
    from reconciler.cli.nccl import nccl

    main.add_command(nccl)
    main.add_command(check)


def _register_secrets() -> None:
    """Attach `reconciler secret` (age-encrypted files of the desired state)."""
    from reconciler.cli.secrets import secret

    main.add_command(secret)


def _register_clusters() -> None:
    """Attach `reconciler explain` (where a value of a cluster's desired state comes from)."""
    from reconciler.cli.clusters import explain

    main.add_command(explain)


if __name__ == "__main__":
    main()
