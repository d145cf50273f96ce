"""What planning and applying need: the desired state, its source, the inventory and the facts."""

from __future__ import annotations

from dataclasses import dataclass, field

from reconciler.desired.inventory import NodeSpec, node_specs
from reconciler.desired.loader import LoadedState
from reconciler.facts.models import ClusterFacts
from reconciler.model import DesiredState


@dataclass
class Context:
    """The desired state with its resolved inventory and, once gathered, the cluster's facts."""

    loaded: LoadedState
    source: str
    limit: set[str] | None = None
    facts: ClusterFacts = field(default_factory=ClusterFacts)
    renders: dict[tuple[str, str], str] = field(default_factory=dict)  # a driver's node-independent renders,
    # kept for one plan (make_plan empties it when it starts)
    read_secrets: bool = True  # False for a pull request's plan: its YAML must not choose what secret we read
    base: DesiredState | None = None  # a pull request's plan: the main branch's state (its .age ciphertexts)

    @property
    def state(self) -> DesiredState:
        """The validated desired state."""
        return self.loaded.state

    @property
    def specs(self) -> dict[str, NodeSpec]:
        """Every inventory node by name."""
        return node_specs(self.state)

    def targets(self) -> list[NodeSpec]:
        """The nodes this run works on (all, or those in --limit)."""
        return [s for n, s in self.specs.items() if self.limit is None or n in self.limit]

    @property
    def controller(self) -> str:
        """The cluster's first controller node (`cluster.controllers`)."""
        return self.state.cluster.controller_names[0]
