"""Gather facts: one SSH round trip per node, answered by the remote script as one JSON document."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import ValidationError

from reconciler.engine.context import Context
from reconciler.engine.driver import Driver
from reconciler.engine.owed import OWED_PATH
from reconciler.facts import parsers
from reconciler.facts.gather import AGENT_COMMAND, GATHER_COMMAND, FactRequest
from reconciler.facts.models import ClusterFacts, FileFact, NodeFacts, StatFact
from reconciler.facts.services import ENABLED, parse_enabled, parse_status, status_command, status_python
from reconciler.transport.base import AgentTransport, CommandResult, Transport


def build_request(ctx: Context, node: str, drivers: Sequence[Driver]) -> FactRequest:
    """The union of what every driver needs from a node."""
    req = FactRequest()
    for driver in drivers:
        driver.request(ctx, node, req)
    req.files.append(OWED_PATH)  # follow-ups an earlier apply left undone (reconciler/engine/owed.py)
    req.services = list(dict.fromkeys(req.services))
    if req.services:
        manager = ctx.specs[node].service_manager
        inline = status_python(manager, req.services)
        if inline is not None:
            req.python["services"] = inline
        else:
            req.commands["services"] = status_command(manager, req.services)
    req.files = list(dict.fromkeys(req.files))
    req.stats = list(dict.fromkeys(req.stats))
    req.hashes = list(dict.fromkeys(req.hashes))
    req.files = [p for p in req.files if p not in req.hashes]  # a path asked for by hash is never read whole
    return req


def parse_node_facts(ctx: Context, node: str, result: CommandResult,
                     services: list[str] | None = None) -> tuple[NodeFacts, dict[str, dict]]:
    """Turn the remote script's JSON into typed facts; an unreachable node is a fact too. SERVICES: the
    names the request asked the state of."""
    if result.error is not None:
        return NodeFacts(node=node, reachable=False, error=result.error), {}
    if result.exit_code != 0:
        why = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
        missing = result.exit_code == 127
        return NodeFacts(node=node, reachable=False, python_missing=missing,
                         error=f"fact gathering failed: {why}"), {}
    try:
        raw = json.loads(result.stdout)
        if "error" in raw and "files" not in raw:  # the script could not read the request
            return NodeFacts(node=node, reachable=False, error=f"fact gathering failed: {raw['error']}"), {}
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
    if "services" in commands:
        facts.services = parse_status(ctx.specs[node].service_manager,
                                      services or [],
                                      commands["services"]["stdout"])
    if ENABLED in commands:
        for name, word in parse_enabled(commands[ENABLED]["stdout"]).items():
            if name in facts.services:
                facts.services[name].enabled = word
    return facts, commands


def gather(ctx: Context, transport: Transport, drivers: Sequence[Driver]) -> ClusterFacts:
    """Gather facts from every target node (and the controller) in parallel."""
    targets = {spec.name: spec for spec in ctx.targets()}
    targets.setdefault(ctx.controller, ctx.specs[ctx.controller])
    requests = {name: build_request(ctx, name, drivers) for name in targets}
    if isinstance(transport, AgentTransport) and transport.agents:  # the daemon: one line to each node's agent
        results = transport.ask_many(list(targets.values()), AGENT_COMMAND,
                                     lambda spec: requests[spec.name].encode())
    else:
        results = transport.run_many(list(targets.values()), GATHER_COMMAND,
                                     stdin=lambda spec: requests[spec.name].encode())
    cluster = ClusterFacts(controller=ctx.controller)
    for name in targets:
        facts, commands = parse_node_facts(ctx, name, results[name], requests[name].services)
        cluster.nodes[name] = facts
        for driver in drivers:  # cluster-wide facts a driver reads from one node's answers (e.g. the scheduler's view)
            try:
                driver.absorb(ctx, cluster, name, facts, commands)
            except (ValueError, TypeError, KeyError, IndexError) as exc:  # a hostile or broken answer: bounded
                facts.reachable = False
                facts.error = f"unreadable facts ({type(driver).__name__}): {str(exc)[:200]}"
                break
    return cluster
