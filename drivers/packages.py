"""Driver for `packages:`: each named package present, absent, at a version or a glob, held or not (apt, dnf)."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.common import versions
from reconciler.common.versions import Backend
from reconciler.desired.managed import selects
from reconciler.desired.upgrade_rules import slurm_role
from reconciler.drivers import package_refresh
from reconciler.drivers import package_tx as tx
from reconciler.drivers.package_tx import Move
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.followups import FollowUp
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import NEEDS_TEXT, Action, Change, Needs, Plan
from reconciler.engine.review import PlanEdit
from reconciler.engine.undo import Restore
from reconciler.facts import packages as pkgfacts
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts
from reconciler.model.packages import PackageSpec


@dataclass(frozen=True)
class Wanted:
    """One package on one node: its spec, whether a downgrade is allowed, and the entry that says so."""

    name: str
    spec: PackageSpec
    allow_downgrade: bool
    entry: int


def kind_of(spec: PackageSpec) -> pkgfacts.Kind:
    """present, absent, exact or glob."""
    if spec.version in ("present", "absent"):
        return "present" if spec.version == "present" else "absent"
    return "glob" if versions.is_glob(spec.version) else "exact"


class PackagesDriver(DriverDefaults):
    """Installs, upgrades, downgrades (only when allowed), removes, holds and unholds the packages `packages:`
    names, with the node's package manager, non-interactively; after the managed files and services phases and
    the metadata refresh they make needed (drivers/package_refresh.py)."""

    name = "packages"
    phase = phase_of("packages")

    def wanted(self, ctx: Context, node: str) -> tuple[dict[str, Wanted], list[str]]:
        """The packages of every entry selecting NODE; and the conflicts (two entries, two specs, one package)."""
        out: dict[str, Wanted] = {}
        conflicts: list[str] = []
        for index, entry in enumerate(ctx.state.packages):
            if not selects(ctx.state, entry, node):
                continue
            for name, spec in entry.packages.items():
                seen = out.get(name)
                if seen is not None and seen.spec != spec:
                    conflicts.append(f"{name}: packages[{seen.entry}] and packages[{index}] want different things "
                                     f"on {node} ({seen.spec.version} / {spec.version})")
                out[name] = Wanted(name, spec, entry.allow_downgrade, index)
        return out, conflicts

    def backend(self, ctx: Context, node: str) -> str | None:
        """The node's package_manager (None: the fact snippet picks it by what the node has)."""
        return ctx.state.nodes[ctx.specs[node].entry].package_manager

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """The package snippet, for the named packages only (nothing when no entry selects the node)."""
        wanted, _ = self.wanted(ctx, node)
        if wanted:
            specs = {n: (kind_of(w.spec), w.spec.version) for n, w in wanted.items()}
            holds = any(w.spec.hold is not None for w in wanted.values())
            cache = any(e.cache_valid_time is not None and selects(ctx.state, e, node) for e in ctx.state.packages)
            req.python[pkgfacts.FACTS_KEY] = pkgfacts.snippet(self.backend(ctx, node), specs, holds, cache)

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """Keep NODE's package facts (a PackageFacts)."""
        if facts.reachable and pkgfacts.FACTS_KEY in commands:
            names = set(self.wanted(ctx, node)[0])
            parsed = pkgfacts.parse_answer(commands[pkgfacts.FACTS_KEY], names)
            cluster.keep(node, parsed)

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """The node's package changes as ONE transaction change (every version change in one apt-get / dnf
        invocation, so a driver and the fabric manager that depends on its exact version move together); an
        error on any named package leaves the whole transaction out (never half of it)."""
        return self.node_changes(ctx, node, refresh=False)

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """On each node whose metadata is refreshed first (drivers/package_refresh.py), its package changes made
        again knowing the refresh comes first."""
        return package_refresh.plan_refreshes(ctx, plan, self.name, self.node_changes)[1]

    def followups(self, ctx: Context, plan: Plan) -> list[FollowUp]:
        """The metadata refreshes the plan needs (drivers/package_refresh.py)."""
        return package_refresh.plan_refreshes(ctx, plan, self.name, self.node_changes)[0]

    def node_changes(self, ctx: Context, node: str, refresh: bool) -> list[Change]:
        """plan(); REFRESH: the metadata is refreshed before the transaction, so a package the repositories do
        not offer yet (or whose offers dnf has no cache for) is installed by name and spec after the refresh."""
        wanted, conflicts = self.wanted(ctx, node)
        if not wanted:
            return []
        if conflicts:
            return [self._change(node, "packages", "error", "; ".join(conflicts))]
        found = ctx.facts.kept_of(pkgfacts.PackageFacts, node)
        if found is None:
            return [self._change(node, f"package {n}", "unknown", f"the packages of {node} were not gathered")
                    for n in wanted]
        problems = found.errors + ([found.cache_error] if found.cache_error and not refresh else [])
        if problems or found.backend not in ("apt", "dnf"):
            why = "; ".join(problems) or f"no package manager ({found.backend})"
            return [self._change(node, f"package {n}", "error", why) for n in wanted]
        backend: Backend = "apt" if found.backend == "apt" else "dnf"
        decided = [self._decide(node, backend, w, found, refresh) for w in wanted.values()]
        errors = [d for d in decided if isinstance(d, Change) and d.action == "error"]
        if errors:
            return errors
        moves = [(d, wanted[d.name]) for d in decided if isinstance(d, Move)]
        ok = [self._change(node, f"package {n}", "ok", "") for n in wanted if n not in {m.name for m, _ in moves}]
        return ok + ([self._transaction(node, backend, moves)] if moves else [])

    def _change(self, node: str, resource: str, action: Action, summary: str) -> Change:
        return Change(node=node, driver=self.name, resource=resource, action=action, phase=self.phase,
                      summary=summary)

    def _decide(self, node: str, backend: Backend, want: Wanted, found: pkgfacts.PackageFacts,
                refresh: bool = False) -> Move | Change | None:
        """What one named package needs: None (nothing), a Move, or an error Change."""
        name, spec = want.name, want.spec
        have = found.installed.get(name)
        current = have.version if have else None
        held = bool(have and have.held)
        hold = held if spec.hold is None else spec.hold
        if spec.version == "absent":
            return None if current is None else Move(name, current, None, held, False)
        if current is not None and (not spec.pinned or versions.matches(backend, spec.version, current)):
            return None if hold == held else Move(name, current, current, held, hold, changes_version=False)
        candidates = found.candidates.get(name, [])
        target = versions.resolve(backend, spec.version, candidates) if spec.pinned else \
            versions.highest(backend, candidates)
        if target is None:
            if refresh:
                return self._after_refresh(node, backend, want, current, held, hold)
            refresh_text = "`apt-get update`" if backend == "apt" else "`dnf makecache`"
            offered = ", ".join(candidates) or "none"
            what = f"{name} {spec.version}" if spec.pinned else name
            return self._change(node, f"package {name}", "error",
                                f"{what} is not available from {node}'s repositories (offered: {offered}); "
                                f"{refresh_text} may not have run, or the repository file may be missing")
        if current is not None and versions.compare(backend, target, current) < 0 and not want.allow_downgrade:
            return self._change(node, f"package {name}", "error",
                                f"{name} {current} → {target} is a downgrade: set allow_downgrade: true on "
                                f"packages[{want.entry}] to allow it")
        return Move(name, current, target, held, hold)

    def _after_refresh(self, node: str, backend: Backend, want: Wanted, current: str | None, held: bool,
                       hold: bool) -> Move | Change:
        """A package the metadata does not offer before the refresh that runs first: installed by its spec after
        it (the package manager picks the version: the newest offered, or matching the glob), where nothing the
        plan cannot see yet must be checked first; else an error saying why it waits for the next apply."""
        name, spec = want.name, want.spec
        exact = spec.pinned and kind_of(spec) == "exact"
        why = None
        if slurm_role(name):
            why = "the Slurm release rules check the version it moves to"
        elif current is not None and not exact:
            why = f"it is installed ({current}) and only an exact version tells an upgrade from a downgrade"
        elif current is not None and versions.compare(backend, spec.version, current) < 0 \
                and not want.allow_downgrade:
            return self._change(node, f"package {name}", "error",
                                f"{name} {current} → {spec.version} is a downgrade: set allow_downgrade: true on "
                                f"packages[{want.entry}] to allow it")
        if why is not None:
            what = f"{name} {spec.version}" if spec.pinned else name
            return self._change(node, f"package {name}", "error",
                                f"{what} is not offered before the metadata refresh this apply runs, and {why}: "
                                f"the next plan, made after the refresh, moves it")
        return Move(name, current, spec.version, held, hold, pending=True)

    def _transaction(self, node: str, backend: Backend, moves: list[tuple[Move, Wanted]]) -> Change:
        """The one change of NODE's packages (resource `package NAME` when it moves one, else `packages`): summary
        listing every move, the needs of the most demanding one, the one command, and its before-image (every
        package back in one transaction, holds as they were)."""
        steps = [m for m, _ in moves]
        needs = {w.spec.needs for m, w in moves if m.changes_version and w.spec.needs}
        need: Needs | None = "reboot" if "reboot" in needs else ("driver-reload" if needs else None)
        summary = ", ".join(m.text for m in steps) + (f" ({NEEDS_TEXT[need]})" if need else "")
        versioned = [m for m in steps if m.changes_version]
        downgrade = any(m.before is not None and m.after is not None
                        and versions.compare(backend, m.after, m.before) < 0 for m in versioned)  # pending: exact
        if all(m.before is None for m in versioned) and versioned and len(versioned) == len(steps):
            action: Action = "create"
        elif all(m.after is None for m in versioned) and versioned and len(versioned) == len(steps):
            action = "delete"
        else:
            action = "update"
        back = [m.reversed() for m in steps]
        undo = Restore(summary=", ".join(_back_text(m) for m in back),
                       check=tx.at_versions(backend, steps) if versioned else None,
                       ops=[RunCommand(command=tx.transaction(backend, back, downgrade=True),
                                       description=f"packages of {node} back as they were")])
        resource = f"package {steps[0].name}" if len(steps) == 1 else "packages"
        return Change(node=node, driver=self.name, resource=resource, action=action, phase=self.phase,
                      summary=summary, needs=need, restore=undo,
                      ops=[RunCommand(command=tx.transaction(backend, steps, downgrade), description=summary)])


def _back_text(move: Move) -> str:
    """What restoring one package does, for the report."""
    if not move.changes_version:
        return f"{'hold' if move.hold else 'unhold'} {move.name} (as before)"
    if move.after is None:
        return f"removed {move.name} (not installed before)"
    return f"{move.name} back to {move.after}" + (" (held)" if move.hold else "")
