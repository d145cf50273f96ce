"""Gather facts: one SSH round trip per node, answered by the remote script as one JSON document."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import ValidationError

from reconciler.backend.base import CommandResult, Transport
from reconciler.drivers import Driver
from reconciler.engine.context import Context
from reconciler.facts import parsers
from reconciler.facts.gather import GATHER_COMMAND, FactRequest
from reconciler.facts.models import ClusterFacts, FileFact, NodeFacts, StatFact
from reconciler.inventory import slurm_node_set
from reconciler.render.files import is_slurm_node
from reconciler.services import parse_status, status_command, status_python


def services_for(ctx: Context, node: str) -> list[str]:
    """The services whose state the engine needs on a node."""
    names = []
    if node in ctx.state.cluster.controller_names:
        names += ["munge", "slurmctld"]
    if is_slurm_node(ctx.state, node) and node not in ctx.state.cluster.controller_names:
        names += ["munge"]
    if node in slurm_node_set(ctx.state):
        names.append("slurmd")
    return list(dict.fromkeys(names))


def build_request(ctx: Context, node: str, drivers: Sequence[Driver]) -> FactRequest:
    """The union of what every driver needs from a node."""
    req = FactRequest()
    for driver in drivers:
        driver.request(ctx, node, req)
    services = services_for(ctx, node)
    if services:
        manager = ctx.specs[node].service_manager
        inline = status_python(manager, services)
        if inline is not None:
            req.python["services"] = inline
        else:
            req.commands["services"] = status_command(manager, services)
    req.files = list(dict.fromkeys(req.files))
    req.stats = list(dict.fromkeys(req.stats))
    req.hashes = list(dict.fromkeys(req.hashes))
    req.files = [p for p in req.files if p not in req.hashes]  # a path asked for by hash is never read whole
    return req


def parse_node_facts(ctx: Context, node: str, result: CommandResult) -> tuple[NodeFacts, dict[str, dict]]:
    """Turn the remote script's JSON into typed facts; an unreachable node is a fact too."""
    if result.error is not None:
        return NodeFacts(node=node, reachable=False, error=result.error), {}
    if result.exit_code != 0:
        why = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
        missing = result.exit_code == 127
        return NodeFacts(node=node, reachable=False, python_missing=missing,
                         error=f"fact gathering failed: {why}"), {}
    try:
        raw = json.loads(result.stdout)
        commands: dict[str, dict] = raw.get("commands", {})
        facts = NodeFacts(
            node=node, reachable=True, hostname=raw.get("hostname"),
            files={p: FileFact(**v) for p, v in raw.get("files", {}).items()},
            stats={p: StatFact(**v) for p, v in raw.get("stats", {}).items()},
        )
    except (ValueError, TypeError, ValidationError) as exc:
        return NodeFacts(node=node, reachable=False, error=f"unreadable facts: {exc}"), {}
    if "mountinfo" in commands:
        facts.mounts = parsers.parse_mountinfo(commands["mountinfo"]["stdout"])
    if "slurm_version" in commands:
        facts.slurm_version = parsers.parse_slurm_version(commands["slurm_version"]["stdout"])
    if "services" in commands:
        facts.services = parse_status(ctx.specs[node].service_manager, services_for(ctx, node),
                                      commands["services"]["stdout"])
    return facts, commands


def gather(ctx: Context, transport: Transport, drivers: Sequence[Driver]) -> ClusterFacts:
    """Gather facts from every target node (and the controller) in parallel."""
    targets = {spec.name: spec for spec in ctx.targets()}
    targets.setdefault(ctx.controller, ctx.specs[ctx.controller])
    requests = {name: build_request(ctx, name, drivers) for name in targets}
    results = transport.run_many(list(targets.values()), GATHER_COMMAND,
                                 stdin=lambda spec: requests[spec.name].to_json())
    cluster = ClusterFacts(controller=ctx.controller)
    for name in targets:
        facts, commands = parse_node_facts(ctx, name, results[name])
        cluster.nodes[name] = facts
        if name == ctx.controller:
            _slurm_view(cluster, facts, commands)
    return cluster


def _slurm_view(cluster: ClusterFacts, facts: NodeFacts, commands: dict[str, dict]) -> None:
    if not facts.reachable:
        cluster.slurm_view_error = f"controller unreachable: {facts.error}"
        return
    nodes = commands.get("scontrol_nodes", {})
    if nodes.get("rc") != 0:
        cluster.slurm_view_error = f"scontrol failed: {nodes.get('stderr', '').strip()[:200]}"
        return
    cluster.slurm_nodes = parsers.parse_scontrol_nodes(nodes.get("stdout", ""))
    cluster.jobs = parsers.parse_squeue(commands.get("squeue", {}).get("stdout", ""))
