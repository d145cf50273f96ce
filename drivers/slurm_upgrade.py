"""Slurm-aware order of package changes: slurmdbd (after the declared backup), then the controllers, then slurmd
and the commands; refused, naming the rule, when Slurm's release window or slurmd <= slurmctld would break.

The engine stays blind to what a package is: this driver reads the plan the package driver made, the package
facts and which daemons run at which version (slurm_running.py), and sets phases, scope and the daemons' steps
(slurm_upgrade_steps.py) on the Slurm package transactions, or turns them into errors. How: in one plan, phase 36
the backup (on the slurmdbd node), 37 the slurmdbd node's transaction, 38 the controllers', 39 every other node
moving a Slurm package; the backup and the slurmdbd and controller transactions are `lead` scope, so their nodes go
out first, in a gated wave of their own in that order (the Applier stops after a phase with a failed node past its
budget, and skips the later phases of a failed node); the slurmd nodes then go in the usual waves, each wave
planned again from fresh facts (the controller's included). The rules judge the version in effect: a daemon that
still runs the old release after its package moved (an upgrade stopped before its restart) counts at the old
release, and is owed its restart, in its phase. It also marks (an `ok` change, resource `running jobs`) the nodes
whose reboot or driver reload waits for running jobs, for the plan's words.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reconciler.common import hostlist, versions
from reconciler.common.versions import Backend
from reconciler.desired import upgrade_rules as rules
from reconciler.drivers import slurm_running as running
from reconciler.drivers import slurm_upgrade_steps as steps
from reconciler.drivers.packages import PackagesDriver, Wanted
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import Op, RunCommand
from reconciler.engine.plan import Change, Plan
from reconciler.engine.report import BUSY_RESOURCE
from reconciler.engine.review import Add, PlanEdit, Replace
from reconciler.engine.undo import Restore
from reconciler.facts import packages as pkgfacts
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts
from reconciler.model.bounds import parse_duration
from reconciler.render.files import file_path

BACKUP_PHASE, DBD_PHASE, CTLD_PHASE, SLURMD_PHASE = (phase_of(n) for n in ("slurmdbd_backup", "slurmdbd", "slurmctld",
                                                                            "slurmd"))
BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
TIERS = {"slurmdbd": 1, "slurmctld": 2, "slurmd": 3}


@dataclass(frozen=True)
class SlurmPackage:
    """One Slurm package on one node: installed (`before`) and planned (`after`) versions (None: not installed)."""

    node: str
    name: str
    role: rules.SlurmRole
    before: str | None
    after: str | None
    entry: int
    running: str | None = None  # its daemon's version as it answers (None: not a daemon, or not known)
    owed: str | None = None  # why its daemon must be (re)started although the package stays (slurm_running)

    @property
    def moves(self) -> bool:
        """True when the plan changes its version."""
        return self.before != self.after

    @property
    def shifts(self) -> bool:
        """True when the plan changes the version in effect: the package moves, or its daemon is (re)started."""
        return self.moves or self.owed is not None

    @property
    def now(self) -> str | None:
        """The version in effect: the running daemon's where it answers with another upstream version than the
        installed package (an upgrade interrupted before its restart), else the installed one."""
        if self.running and self.before and rules.upstream(self.running) != rules.upstream(self.before):
            return self.running
        return self.before

    def at(self, stage: int, node_stage: int) -> str | None:
        """Its version once the nodes of stages <= STAGE have moved (its node moves at NODE_STAGE)."""
        return self.after if node_stage <= stage else self.now

    @property
    def where(self) -> str:
        """Its key path in the desired state."""
        return f"packages[{self.entry}].packages.{self.name}"


def _target(backend: Backend, want: Wanted, found: pkgfacts.PackageFacts) -> str | None:
    """The version the package driver moves the package to (as drivers/packages.py decides; None: removed)."""
    have = found.installed.get(want.name)
    current = have.version if have else None
    if want.spec.version == "absent":
        return None
    if current is not None and (not want.spec.pinned or versions.matches(backend, want.spec.version, current)):
        return current
    offered = found.candidates.get(want.name, [])
    target = versions.resolve(backend, want.spec.version, offered) if want.spec.pinned else \
        versions.highest(backend, offered)
    return target if target is not None else current  # not offered: the package driver's error, no move here


def slurm_packages(ctx: Context, node: str) -> list[SlurmPackage]:
    """The Slurm packages `packages:` names for NODE with their versions now and after the plan ([]: no facts)."""
    wanted, _ = PackagesDriver().wanted(ctx, node)
    named = {n: w for n, w in wanted.items() if rules.slurm_role(n)}
    found = ctx.facts.kept_of(pkgfacts.PackageFacts, node)
    if not named or found is None:
        return []
    if found.errors or found.backend not in ("apt", "dnf"):
        return []
    backend: Backend = "apt" if found.backend == "apt" else "dnf"
    live = ctx.facts.kept_of(running.RunningSlurm, node)
    out = []
    for name, want in sorted(named.items()):
        have = found.installed.get(name)
        role = rules.slurm_role(name)
        assert role is not None
        before, after = (have.version if have else None), _target(backend, want, found)
        version, owed = _running(ctx, node, role, live, before, after)
        out.append(SlurmPackage(node, name, role, before, after, want.entry, version, owed))
    return out


def _running(ctx: Context, node: str, role: rules.SlurmRole, live: running.RunningSlurm | None, before: str | None,
             after: str | None) -> tuple[str | None, str | None]:
    """ROLE's daemon on NODE: the version it answers with, and why it is owed a (re)start although its package
    stays (None: it is not): it runs a replaced binary or another version; slurmdbd or slurmctld is not running."""
    if live is None or role == "client" or before is None or before != after or after is None:
        return None, None
    slurm_node = ctx.facts.slurm_nodes.get(node)
    version = slurm_node.version if role == "slurmd" and slurm_node is not None else live.versions.get(role)
    if role not in live.running:
        # a stopped slurmd is someone's decision (or a reboot's): not the upgrade's to undo
        return version, None if role == "slurmd" else "is not running"
    if version is not None and rules.upstream(version) != rules.upstream(after):
        return version, f"runs {version}"
    return version, "runs a replaced binary" if role in live.replaced else None


def _stage(ctx: Context, node: str, packages: list[SlurmPackage]) -> int:
    """When NODE's Slurm packages move: 1 with slurmdbd, 2 a controller, 3 every other node."""
    if any(p.role == "slurmdbd" for p in packages):
        return TIERS["slurmdbd"]
    if node in ctx.state.cluster.controller_names or any(p.role == "slurmctld" for p in packages):
        return TIERS["slurmctld"]
    return TIERS["slurmd"]


def _rel(version: str | None) -> str | None:
    return rules.release(version) if version else None


def _nodes(items: Iterable[SlurmPackage]) -> str:
    names = sorted({p.node for p in items})
    return hostlist.compress(names[:64]) + (f" and {len(names) - 64} more" if len(names) > 64 else "")


def _window(packages: list[SlurmPackage]) -> list[str]:
    """Each moving package's own step: within Slurm's window, never back a release."""
    found: dict[tuple[str, str, str], list[SlurmPackage]] = {}
    for p in packages:
        old, new = _rel(p.now), _rel(p.after)
        if p.shifts and old and new and (why := rules.window_problem(old, new)):
            found.setdefault((p.name, why[0], why[1]), []).append(p)
    return [f"{name} on {_nodes(items)} ({items[0].where}): {why} (rule {rule})"
            for (name, rule, why), items in found.items()]


def _at(p: SlurmPackage, stage: int, stage_of: dict[str, int]) -> str | None:
    """P's release once the nodes of stages <= STAGE have moved."""
    return _rel(p.at(stage, stage_of[p.node]))


def _skew(everything: list[SlurmPackage], stage_of: dict[str, int]) -> list[str]:
    """At each moment of the order (after slurmdbd, after the controllers, at the end): slurmdbd >= slurmctld >=
    slurmd and the commands, each within the newer one's window; only what this plan moved is blamed. The
    commands on a slurmdbd or controller node move with its daemon (one transaction), not with slurmd."""
    seen: dict[str, list[SlurmPackage]] = {}
    for stage in (1, 2, 3):
        moved = {id(p) for p in everything if p.shifts and stage_of[p.node] <= stage}
        upper = [p for p in everything if p.role == "slurmdbd" and _at(p, stage, stage_of)]
        middle = [p for p in everything if p.role == "slurmctld" and _at(p, stage, stage_of)]
        lower = [p for p in everything if (p.role == "slurmd" or (p.role == "client" and stage_of[p.node] == 3))
                 and _at(p, stage, stage_of)]
        for low_role, lows, highs, rule in (("slurmctld", middle, upper, rules.DBD_RULE),
                                            ("slurmd", lower, middle, rules.NEWER_RULE)):
            for low in lows:
                for high in highs:
                    if id(low) not in moved and id(high) not in moved:
                        continue
                    lo, hi = _at(low, stage, stage_of), _at(high, stage, stage_of)
                    assert lo and hi
                    if rules.release_key(lo) > rules.release_key(hi):
                        text = (f"{low.name} {lo} on {{nodes}} ({{where}}) would run with {high.name} {hi} on "
                                f"{high.node}: {low_role if low.role != 'client' else 'the commands'} newer than "
                                f"{high.role} (rule {rule}); move {high.name} first, in this commit or an earlier one")
                    elif (why := rules.window_problem(lo, hi)) is not None:
                        text = (f"{low.name} {lo} on {{nodes}} would run with {high.name} {hi} on {high.node}: "
                                f"{why[1]} (rule {why[0]})")
                    else:
                        continue
                    seen.setdefault(text, []).append(low)
    out = [text.format(nodes=_nodes(items), where=items[0].where) for text, items in seen.items()]
    if not [p for p in everything if p.role == "slurmctld"]:
        jumps = [p for p in everything if p.role in ("slurmd", "client") and p.shifts
                 and _rel(p.after) and _rel(p.after) != _rel(p.now)]
        if jumps:
            out.append(f"{jumps[0].name} moves to Slurm {_rel(jumps[0].after)} on {_nodes(jumps)} but slurmctld's "
                       f"version is not known: name slurmctld in packages: for the controllers (rule "
                       f"{rules.NEWER_RULE})")
    return out


class SlurmUpgradeDriver(DriverDefaults):
    """Orders the Slurm package transactions of a plan (slurmdbd after its backup, controllers, slurmd) or refuses
    them naming the rule; marks the nodes whose reboot waits for running jobs."""

    name = "slurm-upgrade"
    phase = BACKUP_PHASE

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Which Slurm daemons named in `packages:` for NODE run, on a replaced binary or not, and the versions
        slurmctld and slurmdbd answer with (slurm_running.py); the package driver gathers the packages."""
        wanted, _ = PackagesDriver().wanted(ctx, node)
        daemons = {role for name in wanted if (role := rules.slurm_role(name)) and role != "client"}
        if daemons:
            req.commands[running.FACTS_KEY] = running.command(daemons)

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """Keep NODE's running-daemon facts (a RunningSlurm)."""
        if facts.reachable and running.FACTS_KEY in commands:
            answer = running.parse(commands[running.FACTS_KEY].get("stdout") or "")
            cluster.keep(node, answer)

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Nothing per node: the order needs the whole plan (followups)."""
        return []

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """Order or refuse the plan's Slurm package transactions; mark busy nodes."""
        return self._order(ctx, plan) + self._mark_busy(ctx, plan)

    def _order(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        per_node = {spec.name: found for spec in ctx.targets() if (found := slurm_packages(ctx, spec.name))}
        for name in ctx.state.cluster.controller_names:  # a controller outside --limit still bounds slurmd
            if name not in per_node and (found := slurm_packages(ctx, name)):
                per_node[name] = [SlurmPackage(p.node, p.name, p.role, p.now, p.now, p.entry) for p in found]
        moving = {node for node, items in per_node.items() if any(p.shifts for p in items)}
        if not moving:
            return []
        stage_of = {node: _stage(ctx, node, items) for node, items in per_node.items()}
        everything = [p for items in per_node.values() for p in items]
        refusals = _window(everything) + _skew(everything, stage_of)
        backups = [p for p in everything if p.role == "slurmdbd" and p.shifts and _rel(p.now)
                   and _rel(p.after) and _rel(p.now) != _rel(p.after)]
        command = ctx.state.rollout.slurm_upgrade.backup
        if backups and command is None:
            refusals.append(f"slurmdbd {backups[0].now} → {backups[0].after} on {_nodes(backups)} converts the "
                            f"accounting database: set rollout.slurm_upgrade.backup to the command that backs it up "
                            f"first (rule {rules.BACKUP_RULE})")
        if refusals:
            return self._refuse(plan, moving, refusals)
        edits: list[PlanEdit] = []
        wrapped: set[str] = set()
        for change in plan.changing():
            if change.driver != PackagesDriver.name or change.node not in moving:
                continue
            placed = change.model_copy(deep=True)
            self._place(placed, stage_of[change.node])
            self._daemon_steps(ctx, placed, per_node[change.node])
            edits.append(Replace(change, [placed]))
            wrapped.add(change.node)
        for node in sorted(moving - wrapped):  # no transaction: a daemon an interrupted upgrade left to restart
            owed = [p for p in per_node[node] if p.owed]
            if not owed:
                continue
            change = Change(node=node, driver=self.name, resource=running.owed_resource(p.role for p in owed),
                            action="update", summary=", ".join(f"{p.role} {p.owed} while {p.name} {p.after} is "
                                                               f"installed" for p in owed)
                            + " (an upgrade stopped before its restart)")
            self._place(change, stage_of[node])
            self._daemon_steps(ctx, change, per_node[node])
            edits.append(Add(change))
        for node in sorted({p.node for p in backups}):
            assert command is not None
            step = next(p for p in backups if p.node == node)
            manager = ctx.specs[node].service_manager
            edits.append(Add(Change(
                node=node, driver=self.name, resource="slurmdbd backup", action="update", phase=BACKUP_PHASE,
                summary=f"stop slurmdbd and back up the accounting database before slurmdbd "
                f"{step.now} → {step.after}: {command}",
                ops=[steps.stop(manager, "slurmdbd"), RunCommand(command=command, description="slurmdbd backup")],
                scope="lead",
                restore=Restore(summary="nothing to restore: the backup stays where it was written"))))
        return edits

    @staticmethod
    def _place(change: Change, stage: int) -> None:
        """CHANGE's phase by its node's stage; slurmdbd's and the controllers' lead (a wave of their own, before
        the slurmd waves)."""
        change.phase = {1: DBD_PHASE, 2: CTLD_PHASE}.get(stage, SLURMD_PHASE)
        if stage < TIERS["slurmd"]:
            change.scope = "lead"

    def _daemon_steps(self, ctx: Context, change: Change, packages: list[SlurmPackage]) -> None:
        """Wrap CHANGE's transaction (if any) in Slurm's upgrade steps for the daemons it shifts on its node:
        slurmdbd stopped, moved, started and waited for (its conversion); slurmctld stopped, its StateSaveLocation
        archived, moved, started at its new version; slurmd restarted and registered at its new version. The
        package manager itself starts none of them (apt: slurm_upgrade_steps.without_daemon_restarts)."""
        node, config = change.node, ctx.state.rollout.slurm_upgrade
        manager = ctx.specs[node].service_manager
        moved = {p.role: p for p in packages if p.shifts and p.after is not None and p.role != "client"}
        found = ctx.facts.kept_of(pkgfacts.PackageFacts, node)
        apt = found is not None and found.backend == "apt"
        transaction: list[Op] = [steps.guarded(op.command, op.description) if apt and isinstance(op, RunCommand)
                                 else op for op in change.ops]
        daemon_wait, convert = parse_duration(config.daemon_timeout), parse_duration(config.convert_timeout)
        before: list[Op] = []
        after: list[Op] = []
        words: list[str] = []
        if dbd := moved.get("slurmdbd"):
            before.append(steps.stop(manager, "slurmdbd"))
            after += steps.start_slurmdbd(manager, rules.upstream(dbd.after or ""), convert)
            words.append(f"slurmdbd stopped before and started after, waited for up to {config.convert_timeout} "
                         f"(its database conversion)")
            if _rel(dbd.now) != _rel(dbd.after):  # the old release cannot read a converted database
                change.restore = Restore.none(f"slurmdbd {dbd.now} → {dbd.after} converted the accounting "
                                              f"database: going back means restoring its backup by hand")
        if ctld := moved.get("slurmctld"):
            conf = file_path(ctx.state, "slurm.conf")
            old, new = _rel(ctld.now), _rel(ctld.after)
            # a replaced binary's release is not known (the newer commands beside it get no answer from it, and
            # it cannot be run again against the new libraries: observed 24.11 with 26.05's): archive as well
            unknown = ctld.owed == "runs a replaced binary"
            label = old if old and old != new else "replaced"
            backup = [steps.backup_state(conf, config.state_backup_dir, label, new or "")] \
                if new and ((old and old != new) or unknown) else []
            stop_ctld = [steps.stop(manager, "slurmctld"), *backup]
            if dbd:  # its package moved with slurmdbd's; slurmctld keeps running until slurmdbd answers
                after += stop_ctld
            else:
                before += stop_ctld
            after += steps.start_slurmctld(manager, rules.upstream(ctld.after or ""), daemon_wait)
            words.append("slurmctld stopped" + (f", its StateSaveLocation archived into {config.state_backup_dir}"
                                                if backup else "") + ", started at its new version")
            if backup:  # the old release cannot read state files the new one wrote
                change.restore = Restore.none(f"slurmctld {ctld.now} → {ctld.after} rewrote its state files: "
                                              f"going back means restoring the StateSaveLocation archive by hand"
                                              + (" and the database backup" if dbd else ""))
        live = ctx.facts.kept_of(running.RunningSlurm, node)
        stopped = live is not None and "slurmd" not in live.running
        if (slurmd := moved.get("slurmd")) and stopped:  # someone's stopped slurmd (or a login node's) stays so
            words.append("slurmd is not running there: not started")
        elif slurmd:
            after += steps.restart_slurmd(manager, node, rules.upstream(slurmd.after or ""), daemon_wait)
            words.append("slurmd restarted (running jobs go on) and waited for until it registers at its new "
                         "version")
        if not (before or after or words):
            return
        change.ops = [*before, *transaction, *after]
        change.summary += ("; then " if transaction else ": ") + "; ".join(words)

    @staticmethod
    def _refuse(plan: Plan, moving: set[str], refusals: list[str]) -> list[PlanEdit]:
        """Every transaction moving a Slurm package becomes an error naming the rules (none of it is applied)."""
        summary = "Slurm upgrade refused: " + "; ".join(refusals)
        return [Replace(change, [Change(node=change.node, driver=change.driver, resource=change.resource,
                                        action="error", phase=change.phase, summary=summary)])
                for change in plan.changes
                if change.driver == PackagesDriver.name and change.node in moving and change.changing]

    def _mark_busy(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """An `ok` change on each node whose reboot or driver reload must wait for its running jobs."""
        edits: list[PlanEdit] = []
        for node in sorted({c.node for c in plan.changing() if c.needs}):
            fact = ctx.facts.slurm_nodes.get(node)
            if fact is not None and fact.flags & BUSY_STATES:
                edits.append(Add(Change(node=node, driver=self.name, resource=BUSY_RESOURCE, action="ok",
                                        summary=f"{fact.state}: the reboot or reload waits for its running jobs")))
        return edits
