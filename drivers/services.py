"""Driver for services (`services:`): running or stopped, and (systemd) enabled at boot or not."""

from __future__ import annotations

from reconciler.desired.managed import selects
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import Op, RunCommand
from reconciler.engine.plan import Change
from reconciler.engine.undo import Restore
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import NodeFacts, ServiceFact
from reconciler.facts.services import ENABLED, Action, control_command, enabled_command
from reconciler.model import ManagedService

# `systemctl is-enabled` words that need no `enable` / no `disable`.
ENABLED_OK = frozenset({"enabled", "enabled-runtime", "static", "generated", "alias", "transient", "indirect"})
DISABLED_OK = frozenset({"disabled", "static", "generated", "transient", "indirect", "masked", "masked-runtime",
                         "not-found", "unknown"})
INVERSE: dict[Action, Action] = {"start": "stop", "stop": "start", "enable": "disable", "disable": "enable"}


class ServicesDriver(DriverDefaults):
    """Starts, stops, enables and disables services as `services:` says; after the managed files' phase and
    its follow-ups (a unit or program written there exists, `daemon-reload`/`supervisorctl update` ran)."""

    name = "services"
    phase = phase_of("services")

    def _services(self, ctx: Context, node: str) -> list[ManagedService]:
        return [item for item in ctx.state.services if selects(ctx.state, item, node)]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """The state of each service (one status command for all) and, on systemd, whether it is enabled."""
        wanted = self._services(ctx, node)
        req.services += [item.name for item in wanted]
        boot = [item.name for item in wanted if item.enabled is not None]
        if boot and ctx.specs[node].service_manager.type == "systemd":
            req.commands[ENABLED] = enabled_command(boot)

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """One change per service whose state (or enablement) differs, with its start/stop/enable commands."""
        return [self._plan_service(ctx, node, item, facts.services.get(item.name))
                for item in self._services(ctx, node)]

    def _plan_service(self, ctx: Context, node: str, item: ManagedService, fact: ServiceFact | None) -> Change:
        resource = f"service {item.name}"
        if fact is None:
            return Change(node=node, driver=self.name, resource=resource, action="unknown", phase=self.phase,
                          summary=f"the state of {item.name} was not gathered")
        manager = ctx.specs[node].service_manager
        actions: list[Action] = []
        if item.state == "running" and not fact.running:
            actions.append("start")
        elif item.state == "stopped" and fact.running:
            actions.append("stop")
        if item.enabled is not None and manager.type == "systemd":
            word = fact.enabled or "unknown"
            if item.enabled and word.startswith("masked"):
                return Change(node=node, driver=self.name, resource=resource, action="error", phase=self.phase,
                              summary=f"{item.name} is masked: `systemctl unmask {item.name}` by hand first")
            if item.enabled and word not in ENABLED_OK:
                actions.append("enable")
            elif not item.enabled and word not in DISABLED_OK:
                actions.append("disable")
        if not actions:
            return Change(node=node, driver=self.name, resource=resource, action="ok", phase=self.phase)
        ops: list[Op] = [RunCommand(command=control_command(manager, action, item.name),
                                    description=f"{action} {item.name}") for action in actions]
        now = fact.detail or ("running" if fact.running else "not running")
        undo = [INVERSE[action] for action in reversed(actions)]
        restore = Restore(summary=f"{' and '.join(undo)} {item.name} (as before: {now})",
                          ops=[RunCommand(command=control_command(manager, action, item.name),
                                          description=f"{action} {item.name}") for action in undo])
        return Change(node=node, driver=self.name, resource=resource, action="update", phase=self.phase, ops=ops,
                      summary=f"{' and '.join(actions)} {item.name} (now: {now})", restore=restore)
