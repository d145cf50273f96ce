"""Slurm's view of the cluster for the checks: node states, drain reasons, partitions and running jobs.

One command on the controller (`scontrol show node -o` and `squeue`), parsed with the fact parsers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from reconciler.desired.inventory import NodeSpec
from reconciler.facts.models import JobFact, SlurmNodeFact
from reconciler.facts.parsers import SCONTROL_NODES_COMMAND, SQUEUE_COMMAND, parse_scontrol_nodes, parse_squeue
from reconciler.facts.sections import Section, script, split_sections
from reconciler.transport.base import Transport

VIEW_COMMAND = script([("nodes", SCONTROL_NODES_COMMAND), ("jobs", SQUEUE_COMMAND)])
_PARTITIONS = re.compile(r"(?:^|\s)Partitions=(?P<parts>\S*)")
_NODE_NAME = re.compile(r"^NodeName=(?P<name>\S+)")


@dataclass
class SlurmView:
    """Node states and reasons, each node's partitions, running jobs; `error` when the controller failed."""

    nodes: dict[str, SlurmNodeFact] = field(default_factory=dict)
    partitions: dict[str, list[str]] = field(default_factory=dict)
    jobs: list[JobFact] = field(default_factory=list)
    error: str | None = None

    def jobs_on(self, node: str) -> list[JobFact]:
        """Running jobs that use a node."""
        return [job for job in self.jobs if node in job.nodes]

    def base_state(self, node: str) -> str | None:
        """The first word of the node's state without flags: IDLE, MIXED, ALLOCATED, DOWN, ..."""
        fact = self.nodes.get(node)
        if fact is None:
            return None
        return fact.state.split("+")[0].rstrip("*~#!%$@^-").upper()

    def nodes_in_partition(self, partition: str) -> list[str]:
        """Nodes Slurm lists in a partition, in scontrol's order."""
        return [name for name, parts in self.partitions.items() if partition in parts]

    def set_drain(self, node: str, reason: str | None) -> None:
        """Record a drain (reason) or a resume (None) done by us, so later decisions see it."""
        fact = self.nodes.get(node)
        if fact is None:
            return
        words = [w for w in fact.state.split("+") if w not in ("DRAIN", "DRAINING", "DRAINED")]
        state = "+".join([*words, "DRAIN"] if reason is not None else words)
        self.nodes[node] = SlurmNodeFact(name=node, state=state, reason=reason)


def parse_partitions(text: str) -> dict[str, list[str]]:
    """Each node's partitions from `scontrol show node -o`."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        name = _NODE_NAME.match(line)
        if not name:
            continue
        parts = _PARTITIONS.search(line)
        value = parts.group("parts") if parts else ""
        found[name.group("name")] = [p for p in value.split(",") if p and p != "(null)"]
    return found


def _failed(sec: Section | None, what: str) -> str | None:
    """Why a section cannot be used, or None."""
    if sec is None or sec.rc is None:
        return f"{what}: no output"
    if sec.rc != 0:
        tail = sec.lines[-1] if sec.lines else ""
        return f"{what} exited {sec.rc}" + (f": {tail}" if tail else "")
    return None


def parse_view(output: str) -> SlurmView:
    """Parse the output of VIEW_COMMAND."""
    sections = split_sections(output)
    nodes, jobs = sections.get("nodes"), sections.get("jobs")
    error = _failed(nodes, "scontrol show node") or _failed(jobs, "squeue")
    view = SlurmView(error=error)
    if nodes is not None and nodes.rc == 0:
        view.nodes = parse_scontrol_nodes(nodes.output)
        view.partitions = parse_partitions(nodes.output)
    if jobs is not None and jobs.rc == 0:
        view.jobs = parse_squeue(jobs.output)
    return view


def fetch_view(transport: Transport, controller: NodeSpec) -> SlurmView:
    """Ask the controller for Slurm's view (one round trip); an unreachable controller gives `error`."""
    result = transport.run(controller, VIEW_COMMAND)
    if result.error is not None:
        return SlurmView(error=f"controller {controller.name}: {result.error}")
    return parse_view(result.stdout + result.stderr)
