"""Driver for Slurm accounting: QOS, the account tree and users with their limits, kept as code.

Facts: one command on the controller (`drivers.accounting_facts`). Changes: one per QOS, account and user,
each with a readable diff of the fields that differ and the `sacctmgr -i` commands that make them so, run on
the controller in dependency order (phases): QOS, accounts parents first, users; then removals in reverse
(users, accounts deepest first, QOS). Only what the desired state names is managed: an unset field is left as
it is, an unnamed entity too unless `accounting.prune`. Removing an account or user that has pending or
running jobs is refused with the jobs named, unless `accounting.force_remove`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from reconciler.drivers.accounting_facts import (
    AccountingFacts,
    Assoc,
    Qos,
    accounting_command,
    minutes,
    number,
    parse_accounting,
    tres,
)
from reconciler.drivers.base import unified_diff
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import Change, Plan
from reconciler.engine.review import PlanEdit, Refuse, Warn
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts
from reconciler.model import Accounting, AccountSpec, QosSpec, UserSpec

FACTS_KEY = "accounting"
SACCTMGR = "sacctmgr -i"
PROTECTED_QOS = {"normal"}
PROTECTED_ACCOUNTS = {"root"}
PROTECTED_USERS = {"root"}
PHASE_QOS, PHASE_ACCOUNTS, PHASE_USERS = (phase_of(f"accounting_{n}") for n in ("qos", "accounts", "users"))
PHASE_DEL_USERS, PHASE_DEL_ACCOUNTS, PHASE_DEL_QOS = (phase_of(f"accounting_delete_{n}")
                                                      for n in ("users", "accounts", "qos"))
MAX_DEPTH = 6


def _limit(name: str, value: Any) -> Any:
    """A limit's value, normalised for comparison."""
    if "TRES" in name:
        return tres(None if value is None else str(value))
    if "Wall" in name:
        return minutes(value)
    return number(value)


def _same_limit(name: str) -> Callable[[Any, Any], bool]:
    """Equality of two values of limit NAME, normalised."""
    return lambda a, b: bool(_limit(name, a) == _limit(name, b))


def _show(value: Any) -> str:
    """How a value reads in a diff."""
    if isinstance(value, list):
        return ",".join(value) or "(none)"
    return "(unset)" if value in (None, "") else str(value)


def _token(key: str, value: Any) -> str:
    """One `key=value` argument of sacctmgr, quoted for the shell."""
    text = ",".join(value) if isinstance(value, list) else ("-1" if value is None else str(value))
    return shlex.quote(f"{key}={text}")


class Diff:
    """The fields of one entity that differ: (name, current, desired, sacctmgr key, value to set)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, Any, Any, str, Any]] = []

    def check(self, name: str, current: Any, desired: Any, key: str, same: Callable[[Any, Any], bool] | None = None,
              value: Any = None) -> None:
        """Add a row when DESIRED is set (not None) and differs from CURRENT."""
        if desired is None:
            return
        equal = same(current, desired) if same else current == desired
        if not equal:
            self.rows.append((name, current, desired, key, desired if value is None else value))

    def limits(self, current: dict[str, str], desired: dict[str, Any], options: dict[str, str] | None = None) -> None:
        """Each set limit against the current one (both normalised); OPTIONS renames sacctmgr's option."""
        for name, want in desired.items():
            if want is None:
                continue
            have = current.get(name, "")
            value = want
            if "TRES" in name:  # sacctmgr sets only the TRES named: clear the others explicitly
                dropped = sorted(set(tres(have)) - set(tres(str(want))))
                value = ",".join([str(want), *(f"{t}=-1" for t in dropped)])
            self.check(name, have, want, (options or {}).get(name, name), _same_limit(name), value)

    def settings(self, keys: set[str] | None = None) -> list[str]:
        """The `key=value` arguments that set the desired values (only KEYS when given)."""
        return [_token(key, value) for _, _, _, key, value in self.rows if keys is None or key in keys]

    def text(self, title: str, node: str) -> str:
        """A unified diff of the differing fields, current against desired."""
        before = "".join(f"{name}: {_show(cur)}\n" for name, cur, _, _, _ in self.rows)
        after = "".join(f"{name}: {_show(want)}\n" for name, _, want, _, _ in self.rows)
        return unified_diff(f"accounting/{title}", node, before, after)

    def summary(self) -> str:
        """`field old -> new, ...`."""
        return ", ".join(f"{name} {_show(cur)} -> {_show(want)}" for name, cur, want, _, _ in self.rows)


def _as_list(values: list[Any] | None) -> list[str] | None:
    """A desired list, sorted like sacctmgr's; None (unmanaged) stays None."""
    return None if values is None else sorted(str(v) for v in values)


def qos_diff(spec: QosSpec, current: Qos) -> Diff:
    """What differs between a QOS and its desired state."""
    diff = Diff()
    diff.check("description", current.description, spec.description, "Description", _same_text)
    diff.check("priority", current.priority, spec.priority, "Priority")
    diff.check("preempt", current.preempt, _as_list(spec.preempt), "Preempt")
    diff.check("preempt_mode", current.preempt_mode, spec.preempt_mode, "PreemptMode")
    diff.check("flags", current.flags, _as_list(spec.flags), "Flags")
    diff.check("usage_factor", current.usage_factor, spec.usage_factor, "UsageFactor",
               lambda a, b: abs(float(a) - float(b)) < 1e-9)
    diff.limits(current.limits, spec.limits.model_dump())
    return diff


ASSOC_OPTIONS = {"MaxTRESPerJob": "MaxTRES"}  # what sacctmgr calls them on associations
ADMIN_OPTION = {"Administrator": "Admin"}


def _same_text(current: Any, desired: Any) -> bool:
    """Text as sacctmgr stores it: case does not count."""
    return str(current).lower() == str(desired).lower()


def _share(current: str, desired: int | str) -> bool:
    return str(current).lower() == str(desired).lower()


def assoc_diff(spec: AccountSpec | UserSpec, current: Assoc | None, parent: str | None = None) -> Diff:
    """What differs in an association: parent (accounts), fair-share, QOS, default QOS, limits."""
    diff = Diff()
    empty = Assoc(account="", user="", parent="", share="1", qos=[], default_qos="", limits={})
    current = current or empty
    if parent is not None:
        diff.check("parent", current.parent, parent, "Parent")
    diff.check("fairshare", current.share, spec.fairshare, "Fairshare", _share)
    diff.check("qos", current.qos, _as_list(spec.qos), "QOS")
    diff.check("default_qos", current.default_qos, spec.default_qos, "DefaultQOS")
    diff.limits(current.limits, spec.limits.model_dump(), ASSOC_OPTIONS)
    return diff


class Planner:
    """Builds the accounting changes of one cluster: pure, from the desired state and the facts."""

    def __init__(self, desired: Accounting, actual: AccountingFacts, cluster: str, controller: str) -> None:
        self.desired, self.actual, self.cluster, self.controller = desired, actual, cluster, controller
        self.changes: list[Change] = []
        # where each account sits: as the desired state says, else as the database does (for removals)
        self.parents = {a.account: a.parent for a in actual.assocs if not a.user and a.parent}
        self.parents.update({a.name: a.parent for a in desired.accounts if a.state == "present"})
        # indexes of the associations: looked up once per account and user (a scan each is quadratic at 20,000)
        self.account_assocs: dict[str, Assoc] = {}
        self.user_assocs: dict[str, dict[str, Assoc]] = {}
        self.children: dict[str, list[str]] = {}
        for assoc in actual.assocs:
            if assoc.user:
                self.user_assocs.setdefault(assoc.user, {})[assoc.account] = assoc
            else:
                self.account_assocs.setdefault(assoc.account, assoc)
                self.children.setdefault(assoc.parent, []).append(assoc.account)

    # ------------------------------------------------------------ helpers

    def _change(self, kind: str, name: str, action: str, phase: int, commands: list[str], summary: str,
                diff: str | None = None) -> None:
        self.changes.append(Change(node=self.controller, driver=AccountingDriver.name, resource=f"{kind} {name}",
                                   action=action, phase=phase, run_on=self.controller, scope="cluster",  # type: ignore[arg-type]
                                   ops=[RunCommand(command=c) for c in commands], summary=summary, diff=diff))

    def _depth(self, name: str) -> int:
        depth, seen = 0, set()
        while name in self.parents and name not in seen and self.parents[name] != "root":
            seen.add(name)
            name = self.parents[name]
            depth += 1
        return min(depth, MAX_DEPTH)

    def _subtree(self, name: str) -> set[str]:
        """NAME and every account under it, by the current database."""
        found, todo = {name}, [name]
        while todo:
            for child in self.children.get(todo.pop(), []):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found

    def _blocked(self, what: str, jobs: list[str]) -> bool:
        """Refuse a removal that would hit pending or running jobs (unless forced); True when refused."""
        if not jobs or self.desired.force_remove:
            return False
        shown = ", ".join(jobs[:10]) + (f" and {len(jobs) - 10} more" if len(jobs) > 10 else "")
        self._refuse(what, f"pending or running jobs {shown} (wait for them, or set accounting.force_remove)")
        return True

    def _refuse(self, what: str, why: str) -> None:
        """An error change: removing WHAT is refused, for WHY."""
        self.changes.append(Change(node=self.controller, driver=AccountingDriver.name, resource=what, action="error",
                                   phase=PHASE_DEL_USERS, run_on=self.controller,
                                   summary=f"refused: remove {what}: {why}"))

    def _defaults_in(self, accounts: set[str]) -> list[str]:
        """Users whose default account (by the database) is in ACCOUNTS and stays there: not removed by the
        desired state, nor given a default account elsewhere."""
        desired = {u.name: u for u in self.desired.users}
        found = []
        for user, (default, _level) in sorted(self.actual.users.items()):
            spec = desired.get(user)
            if default not in accounts or user in PROTECTED_USERS:
                continue
            kept = not self.desired.prune if spec is None else (spec.state == "present"
                                                                and spec.default_account in accounts)
            if kept:
                found.append(user)
        return found

    def _jobs(self, test: Callable[[str, str], bool]) -> list[str]:
        return [f"{j.id} ({j.state.lower()}, {j.user})" for j in self.actual.jobs if test(j.user, j.account)]

    # ------------------------------------------------------------ entities

    def plan(self) -> list[Change]:
        """Every change, in apply order."""
        self._qos()
        for account in sorted(self.desired.accounts, key=lambda a: (self._depth(a.name), a.name)):
            self._account(account)
        for user in sorted(self.desired.users, key=lambda u: u.name):
            self._user(user)
        if self.desired.prune:
            self._prune()
        return self.changes

    def _qos(self) -> None:
        for spec in self.desired.qos:
            current = self.actual.qos.get(spec.name)
            if spec.state == "absent":
                if current is not None and spec.name not in PROTECTED_QOS:
                    self._remove_qos(spec.name)
                continue
            if current is None:
                diff = qos_diff(spec, Qos(name=spec.name, priority=-1))
                command = " ".join([SACCTMGR, "add qos", shlex.quote(spec.name), *diff.settings()])
                self._change("qos", spec.name, "create", PHASE_QOS, [command], f"create QOS {spec.name}",
                             diff.text(f"qos {spec.name}", self.controller))
                continue
            diff = qos_diff(spec, current)
            if diff.rows:
                command = " ".join([SACCTMGR, "modify qos where", _token("name", spec.name), "set", *diff.settings()])
                title = f"qos {spec.name}"
                self._change("qos", spec.name, "update", PHASE_QOS, [command],
                             f"update QOS {spec.name}: {diff.summary()}", diff.text(title, self.controller))

    def _remove_qos(self, name: str) -> None:
        command = " ".join([SACCTMGR, "remove qos where", _token("name", name)])
        self._change("qos", name, "delete", PHASE_DEL_QOS, [command], f"remove QOS {name}")

    def _account(self, spec: AccountSpec) -> None:
        record = self.actual.accounts.get(spec.name)
        assoc = self.account_assocs.get(spec.name)
        if spec.state == "absent":
            if (record or assoc) and spec.name not in PROTECTED_ACCOUNTS:
                self._remove_account(spec.name)
            return
        cluster = _token("cluster", self.cluster)
        info = Diff()
        # sacctmgr keeps descriptions and organizations in lower case
        info.check("description", record[0] if record else "", spec.description, "Description", _same_text)
        info.check("organization", record[1] if record else "", spec.organization, "Organization", _same_text)
        links = assoc_diff(spec, assoc, parent=spec.parent)
        phase = PHASE_ACCOUNTS + self._depth(spec.name)
        if record is None or assoc is None:
            links = assoc_diff(spec, None, parent=spec.parent)
            both = Diff()
            both.rows = info.rows + links.rows
            command = " ".join([SACCTMGR, "add account", shlex.quote(spec.name), cluster, *both.settings()])
            self._change("account", spec.name, "create", phase, [command], f"create account {spec.name}",
                         both.text(f"account {spec.name}", self.controller))
            return
        commands = []
        if info.rows:
            commands.append(" ".join([SACCTMGR, "modify account where", _token("name", spec.name), "set",
                                      *info.settings()]))
        if links.rows:
            commands.append(" ".join([SACCTMGR, "modify account where", _token("name", spec.name), cluster, "set",
                                      *links.settings()]))
        if commands:
            both = Diff()
            both.rows = info.rows + links.rows
            self._change("account", spec.name, "update", phase, commands,
                         f"update account {spec.name}: {both.summary()}",
                         both.text(f"account {spec.name}", self.controller))

    def _remove_account(self, name: str) -> None:
        subtree = self._subtree(name)
        if self._blocked(f"account {name}", self._jobs(lambda _u, account: account in subtree)):
            return
        # sacctmgr's answer to removing a user's default account differs by release and state: recorded on the
        # testbeds, 24.11 refuses ('You can not remove the default account of a user') where 22.05 deletes the
        # account and leaves the user in the database with no default account, and both delete it when it was
        # the user's only association. Refused here instead, the same on every release.
        stranded = self._defaults_in(subtree)
        if stranded:
            shown = ", ".join(stranded[:10]) + (f" and {len(stranded) - 10} more" if len(stranded) > 10 else "")
            self._refuse(f"account {name}", f"the default account of user(s) {shown} "
                                            "(give them another default_account, or remove them)")
            return
        command = " ".join([SACCTMGR, "remove account where", _token("name", name)])
        phase = PHASE_DEL_ACCOUNTS + (MAX_DEPTH - self._depth(name))
        self._change("account", name, "delete", phase, [command], f"remove account {name}")

    def _user(self, spec: UserSpec) -> None:
        current = self.actual.users.get(spec.name)
        assocs = dict(self.user_assocs.get(spec.name, {}))
        if spec.state == "absent":
            if (current or assocs) and spec.name not in PROTECTED_USERS:
                self._remove_user(spec.name)
            return
        cluster = _token("cluster", self.cluster)
        name = shlex.quote(spec.name)
        wanted = [spec.default_account, *[a for a in spec.accounts if a != spec.default_account]]
        commands: list[str] = []
        rows = Diff()
        if current is None:
            level = ADMIN_OPTION.get(spec.admin_level or "", spec.admin_level)
            admin = [_token("AdminLevel", level)] if spec.admin_level else []
            commands.append(" ".join([SACCTMGR, "add user", name, _token("Account", spec.default_account),
                                      _token("DefaultAccount", spec.default_account), cluster, *admin]))
            rows.check("default_account", "", spec.default_account, "DefaultAccount")
            rows.check("admin_level", "", spec.admin_level, "AdminLevel")
            assocs = {}
            assocs_made = {spec.default_account}
        else:
            assocs_made = set(assocs)
        for account in wanted:
            if account not in assocs_made:
                commands.append(" ".join([SACCTMGR, "add user", name, _token("Account", account), cluster]))
        if current is not None:
            record = Diff()
            record.check("default_account", current[0], spec.default_account, "DefaultAccount")
            record.check("admin_level", current[1], spec.admin_level, "AdminLevel",
                         value=ADMIN_OPTION.get(spec.admin_level or "", spec.admin_level))
            if record.rows:
                commands.append(" ".join([SACCTMGR, "modify user where", _token("name", spec.name), "set",
                                          *record.settings()]))
            rows.rows += record.rows
        missing = [a for a in wanted if a not in assocs]
        if missing:
            rows.rows.append(("accounts", sorted(assocs), sorted(wanted), "", None))
        for account in wanted:
            links = assoc_diff(spec, assocs.get(account))
            if links.rows:
                commands.append(" ".join([SACCTMGR, "modify user where", _token("name", spec.name),
                                          _token("account", account), cluster, "set", *links.settings()]))
                rows.rows += [(f"{account}.{field}", cur, want, key, value)
                              for field, cur, want, key, value in links.rows]
        extra = sorted(set(assocs) - set(wanted))
        if extra:
            jobs = self._jobs(lambda user, account: user == spec.name and account in extra)
            if not self._blocked(f"user {spec.name} in {','.join(extra)}", jobs):
                commands += [" ".join([SACCTMGR, "remove user where", _token("name", spec.name),
                                       _token("account", account), cluster]) for account in extra]
                if not missing:
                    rows.rows.append(("accounts", sorted(assocs), sorted(wanted), "", None))
        if commands:
            action = "create" if current is None else "update"
            summary = f"create user {spec.name}" if current is None else f"update user {spec.name}: {rows.summary()}"
            self._change("user", spec.name, action, PHASE_USERS, commands, summary,
                         rows.text(f"user {spec.name}", self.controller))

    def _remove_user(self, name: str) -> None:
        if self._blocked(f"user {name}", self._jobs(lambda user, _a: user == name)):
            return
        command = " ".join([SACCTMGR, "remove user where", _token("name", name)])
        self._change("user", name, "delete", PHASE_DEL_USERS, [command], f"remove user {name}")

    def _prune(self) -> None:
        users = {u.name for u in self.desired.users}
        for name in sorted(set(self.actual.users) - users - PROTECTED_USERS):
            self._remove_user(name)
        accounts = {a.name for a in self.desired.accounts}
        for name in sorted(set(self.actual.accounts) - accounts - PROTECTED_ACCOUNTS):
            self._remove_account(name)
        qos = {q.name for q in self.desired.qos}
        for name in sorted(set(self.actual.qos) - qos - PROTECTED_QOS):
            self._remove_qos(name)


class AccountingDriver(DriverDefaults):
    """Slurm's accounting database (QOS, accounts, users, limits) against `accounting:`, through sacctmgr."""

    name = "accounting"
    phase = PHASE_QOS

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """The controller reads the accounting database and the jobs (only when `accounting:` is set)."""
        if ctx.state.accounting is not None and node == ctx.controller:
            req.commands[FACTS_KEY] = accounting_command(ctx.state.cluster.name)

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """The controller's answer, parsed (an AccountingFacts kept for the controller)."""
        if ctx.state.accounting is None or node != ctx.controller:
            return
        if not facts.reachable:
            cluster.keep(node, AccountingFacts(error=f"controller unreachable: {facts.error}"))
            return
        answer = commands.get(FACTS_KEY, {})
        cluster.keep(node, parse_accounting(answer.get("stdout", "") + answer.get("stderr", "")))

    def facts_of(self, ctx: Context) -> AccountingFacts | None:
        """The accounting facts gathered for this plan, if any."""
        return ctx.facts.kept_of(AccountingFacts, ctx.controller)

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """An unreadable accounting database is a plan error (nothing planned for it)."""
        actual = self.facts_of(ctx)
        if ctx.state.accounting is not None and actual is not None and actual.error:
            message = f"accounting: {actual.error}: accounts, users and QOS not planned"
            # the plan writes the first slurm.conf: no Slurm to ask yet (the next run plans the accounting)
            first_config = any(c.node == ctx.controller and c.resource.endswith("/slurm.conf")
                               and c.action == "create" for c in plan.changes)
            return [Warn(message) if first_config else Refuse(message)]
        return []

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Accounting changes are planned once, on the controller."""
        desired = ctx.state.accounting
        actual = self.facts_of(ctx)
        if desired is None or node != ctx.controller or actual is None or actual.error:
            return []
        return Planner(desired, actual, ctx.state.cluster.name, ctx.controller).plan()
