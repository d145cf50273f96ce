"""When a node's package metadata is refreshed (`apt-get update`, `dnf makecache`) before its package transaction,
and why: a repository or key file the plan changes on it, metadata older than an entry's `cache_valid_time`, or an
entry's `update_cache` with a transaction to run. The refresh is a follow-up step after the files and services
phases and before every package transaction (phase 36 on), so a repository added in the same commit as a package
it offers converges in one apply; the plan only reads the metadata's age (a stat), it never refreshes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from reconciler.desired.managed import selects
from reconciler.drivers.package_tx import DNF, LOCK_WAIT
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.followups import ORDER_COMMAND, FollowUp, command
from reconciler.engine.plan import Change, Plan
from reconciler.engine.review import Add, PlanEdit, Replace
from reconciler.facts import packages as pkgfacts

Manager = Literal["apt", "dnf"]
# After the managed files (30) and services (35) phases, before the slurmdbd backup (36) and every package
# transaction (36-39; drivers/slurm_upgrade.py): the follow-ups of phase 35 run after its changes.
REFRESH_PHASE = phase_of("package_refresh")
# Files whose change makes the metadata stale: where repositories, their keys, their credentials and the
# variables in their URLs live (a path equal to an entry, or under one ending in /).
REPO_PATHS: dict[Manager, tuple[str, ...]] = {
    "apt": ("/etc/apt/sources.list", "/etc/apt/sources.list.d/", "/etc/apt/keyrings/", "/etc/apt/trusted.gpg",
            "/etc/apt/trusted.gpg.d/", "/usr/share/keyrings/", "/etc/apt/auth.conf", "/etc/apt/auth.conf.d/"),
    "dnf": ("/etc/yum.repos.d/", "/etc/pki/rpm-gpg/", "/etc/dnf/dnf.conf", "/etc/dnf/vars/", "/etc/yum.conf")}
LABEL: dict[Manager, str] = {"apt": "apt-get update", "dnf": "dnf makecache"}
# The refresh fails when any repository cannot be fetched (apt-get update alone exits 0 after a failed fetch);
# it then leaves the stamp the facts read (facts/packages.py CACHE_STAMPS) for the metadata's age.
COMMAND: dict[Manager, str] = {
    "apt": (f"DEBIAN_FRONTEND=noninteractive apt-get update -q -o DPkg::Lock::Timeout={LOCK_WAIT} "
            "-o APT::Update::Error-Mode=any && mkdir -p /var/lib/apt/periodic && "
            f"touch {pkgfacts.CACHE_STAMPS['apt'][0]}"),
    "dnf": f"{DNF.format(wait=LOCK_WAIT)} makecache --refresh && touch {pkgfacts.CACHE_STAMPS['dnf'][0]}"}

NodePlanner = Callable[[Context, str, bool], list[Change]]


def repo_manager(path: str) -> Manager | None:
    """The package manager whose metadata a change of PATH makes stale (None: neither)."""
    for manager, prefixes in REPO_PATHS.items():
        if any(path == p.rstrip("/") or (p.endswith("/") and path.startswith(p)) for p in prefixes):
            return manager
    return None


def _age_text(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _facts(ctx: Context, node: str) -> pkgfacts.PackageFacts | None:
    return ctx.facts.kept_of(pkgfacts.PackageFacts, node)


def _manager(found: pkgfacts.PackageFacts | None) -> Manager | None:
    """The package manager the node's package facts were read with (None: none, or not gathered)."""
    if found is not None and found.backend == "apt":
        return "apt"
    return "dnf" if found is not None and found.backend == "dnf" else None


def reasons(ctx: Context, plan: Plan, node: str) -> dict[Manager, list[str]]:
    """Why NODE's metadata must be refreshed before its transaction, per package manager: repository files the
    plan changes on it, and metadata older than an entry's cache_valid_time (update_cache: see plan_refreshes)."""
    out: dict[Manager, list[str]] = {}
    for change in plan.changes:
        if change.node != node or not change.changing or not change.resource.startswith("/"):
            continue
        manager = repo_manager(change.resource)
        if manager is not None:
            verb = {"create": "added", "delete": "removed"}.get(change.action, "changed")
            out.setdefault(manager, []).append(f"{change.resource} {verb}")
    found = _facts(ctx, node)
    backend = _manager(found)
    if found is None or backend is None or not found.cache_asked:
        return out
    entries = [(i, e.cache_valid_time) for i, e in enumerate(ctx.state.packages)
               if e.cache_valid_time is not None and selects(ctx.state, e, node)]
    if entries:
        index, valid = min(entries, key=lambda item: item[1] or 0)
        assert valid is not None
        if found.cache_age is None:
            out.setdefault(backend, []).append(f"the metadata was never refreshed (packages[{index}] "
                                               f"cache_valid_time: {valid})")
        elif found.cache_age > valid:
            out.setdefault(backend, []).append(f"the metadata is {_age_text(found.cache_age)} old, older than "
                                               f"packages[{index}] cache_valid_time: {valid}")
    return out


def plan_refreshes(ctx: Context, plan: Plan, driver: str, replan: NodePlanner) -> tuple[list[FollowUp],
                                                                                      list[PlanEdit]]:
    """The refresh steps of the plan, each node's with the package manager its packages use (its package facts;
    else its inventory package_manager; else none: a repository file of the other manager, or of a node whose
    manager is unknown, refreshes nothing); and the edits putting, on each node refreshed, its package changes
    made again by REPLAN(ctx, node, refresh=True) (a version the repositories do not offer yet is installed after
    the refresh instead of being an error) in place of DRIVER's."""
    steps: list[FollowUp] = []
    edits: list[PlanEdit] = []
    for spec in ctx.targets():
        node = spec.name
        facts = ctx.facts.nodes.get(node)
        if facts is None or not facts.reachable:
            continue
        found = _facts(ctx, node)
        backend = _manager(found) or ctx.state.nodes[spec.entry].package_manager
        if backend is None:
            continue  # no packages here and no package_manager declared: which metadata is unknown
        why = {backend: reasons(ctx, plan, node).get(backend, [])}
        if found is not None:
            updating = [i for i, e in enumerate(ctx.state.packages) if e.update_cache and selects(ctx.state, e, node)]
            if why.get(backend) or updating:
                changes = replan(ctx, node, True)
                if updating and any(c.changing for c in changes):
                    why.setdefault(backend, []).append(
                        f"packages[{updating[0]}] update_cache: before the node's package transaction")
                if why.get(backend):
                    edits += _replace(plan, node, driver, changes)
        if why[backend]:
            steps.append(command(node, COMMAND[backend], REFRESH_PHASE, why[backend][0], label=LABEL[backend],
                                 order=ORDER_COMMAND))
            steps[-1].reasons += why[backend][1:]
    return steps, edits


def _replace(plan: Plan, node: str, driver: str, changes: Sequence[Change]) -> list[PlanEdit]:
    """DRIVER's changes of NODE replaced by CHANGES (in the first one's place; the plan's errors go with them)."""
    old = [c for c in plan.changes if c.node == node and c.driver == driver]
    if not old:
        return [Add(c) for c in changes]
    return [Replace(old[0], changes), *(Replace(c, ()) for c in old[1:])]
