"""Checks across the whole desired state that no single key can make (unknown nodes, duplicates, ...)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence

from reconciler import params as slurm_params
from reconciler.common import hostlist
from reconciler.desired import packagecheck, targets, upgrade_rules
from reconciler.desired.inventory import node_specs
from reconciler.desired.lockout import lockouts
from reconciler.desired.relations import relations
from reconciler.model import AccountSpec, DesiredState, SlurmScalar, UserSpec
from reconciler.model import values as value_rules
from reconciler.model.kernel import kernel_problems
from reconciler.model.state import section_paths, sections

Problem = tuple[tuple[str | int, ...], str]


def _unknown(expr: str, known: set[str]) -> list[str]:
    return [name for name in hostlist.expand(expr) if name not in known]


def _names(names: list[str], shown: int = 64) -> str:
    if len(names) <= shown:  # compressing a huge hostile list only to print it would cost seconds
        return hostlist.compress(names)
    return f"{hostlist.compress(names[:shown])} and {len(names) - shown} more"


def _inventory(state: DesiredState) -> Iterator[Problem]:
    seen: dict[str, int] = {}
    for index, entry in enumerate(state.nodes):
        for name in hostlist.expand(entry.name):
            if name in seen:
                yield ("nodes", index, "name"), f"duplicate node {name!r} (already in nodes[{seen[name]}])"
            else:
                seen[name] = index


def _slurm(state: DesiredState, known: set[str]) -> Iterator[Problem]:
    cluster = state.cluster
    in_set: dict[str, int] = {}
    for index, node_set in enumerate(cluster.node_sets):
        path = ("cluster", "node_sets", index, "nodes")
        for name in hostlist.expand(node_set.nodes):
            if name in in_set:
                yield path, f"node {name!r} is in two node sets (also node_sets[{in_set[name]}])"
            in_set[name] = index
        if missing := _unknown(node_set.nodes, known):
            yield path, f"names nodes not in the inventory: {_names(missing)}"
    for index, host in enumerate(cluster.controller_names):
        if host not in known:
            yield ("cluster", "controllers", index), f"controller {host!r} is not in the inventory"
    defaults = [p.name for p in cluster.partitions if p.default]
    if len(defaults) > 1:
        yield ("cluster", "partitions"), f"more than one default partition: {', '.join(defaults)}"
    seen_parts: set[str] = set()
    for index, part in enumerate(cluster.partitions):
        if part.name in seen_parts:
            yield ("cluster", "partitions", index, "name"), f"duplicate partition {part.name!r}"
        seen_parts.add(part.name)
        if part.nodes is None:
            continue
        if missing := _unknown(part.nodes, known):
            yield ("cluster", "partitions", index, "nodes"), f"unknown nodes: {_names(missing)}"
        elif missing := [n for n in hostlist.expand(part.nodes) if n not in in_set]:
            yield ("cluster", "partitions", index, "nodes"), f"nodes in no node set: {_names(missing)}"
    if cluster.gres:
        for index, line in enumerate(cluster.gres.lines):
            if line.nodes and (missing := _unknown(line.nodes, known)):
                yield ("cluster", "gres", "lines", index, "nodes"), f"unknown nodes: {_names(missing)}"


def _under_export(server: tuple[str, str], exported: set[tuple[str, str]]) -> bool:
    """True when the server's path is an exported path or below one (NFS mounts subdirectories of an export)."""
    host, path = server
    path = path.rstrip("/") or "/"
    return any(host == h and (path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") or p == "/")
               for h, p in exported)


def _storage(state: DesiredState, known: set[str], roles: dict[str, set[str]]) -> Iterator[Problem]:
    servers = {name for name, r in roles.items() if "nfs-server" in r}
    exported: set[tuple[str, str]] = set()
    for index, export in enumerate(state.storage.exports):
        path = ("storage", "exports", index, "server")
        if export.server not in known:
            yield path, f"unknown node {export.server!r}"
        elif export.server not in servers:
            yield path, f"node {export.server!r} exports NFS but has no 'nfs-server' role"
        exported.add((export.server, export.path))
    if state.storage.exports and not servers:
        yield ("storage", "exports"), "exports are defined but no node has the 'nfs-server' role"
    taken: dict[tuple[str, str], int] = {}
    for index, mount in enumerate(state.storage.mounts):
        if missing := _unknown(mount.nodes, known):
            yield ("storage", "mounts", index, "nodes"), f"unknown nodes: {_names(missing)}"
        for name in hostlist.expand(mount.nodes):
            key = (name, mount.mountpoint)
            if key in taken:
                yield ("storage", "mounts", index, "mountpoint"), (
                    f"two mounts on {mount.mountpoint} on node {name} (also storage.mounts[{taken[key]}])")
                break
            taken[key] = index
        server = mount.nfs_server()
        if server and server[0] in known and state.storage.exports and not _under_export(server, exported):
            yield ("storage", "mounts", index, "source"), f"{mount.source} is not exported in storage.exports"


def _others(state: DesiredState, known: set[str]) -> Iterator[Problem]:
    partitions = {p.name for p in state.cluster.partitions}
    for index, image in enumerate(state.images):
        if image.import_on not in known:
            yield ("images", index, "import_on"), f"unknown node {image.import_on!r}"
    for index, patch in enumerate(state.patches):
        if missing := _unknown(patch.nodes, known):
            yield ("patches", index, "nodes"), f"unknown nodes: {_names(missing)}"
    for kind in ("node", "nccl"):
        for index, check in enumerate(getattr(state.checks, kind)):
            if check.nodes and (missing := _unknown(check.nodes, known)):
                yield ("checks", kind, index, "nodes"), f"unknown nodes: {_names(missing)}"
            partition = getattr(check, "partition", None)
            if partition and partition not in partitions:
                yield ("checks", kind, index, "partition"), f"unknown partition {partition!r}"
    canary = state.rollout.canary
    if isinstance(canary, str) and not canary.endswith("%") and (missing := _unknown(canary, known)):
        yield ("rollout", "canary"), f"unknown nodes: {_names(missing)}"


def _selected(nodes: str | None, wanted: list[str], roles: dict[str, set[str]]) -> list[str]:
    named = set(hostlist.expand(nodes)) if nodes else set()
    return [n for n in roles if n in named or roles[n] & set(wanted)]


def _claim(taken: dict[tuple[str, str], int], keys: Iterable[tuple[str, str]],
           index: int) -> tuple[tuple[str, str], int] | None:
    """Record INDEX as the owner of each key; the first key another entry owns already, with that entry."""
    for key in keys:
        if key in taken:
            return key, taken[key]
        taken[key] = index
    return None


def _services(state: DesiredState, known: set[str], roles: dict[str, set[str]],
              stopped: dict[tuple[str, str], int]) -> Iterator[Problem]:
    """Unknown nodes, one entry per service and node, `enabled` only where systemd runs; fills STOPPED."""
    seen: dict[tuple[str, str], int] = {}
    managers = {name: spec.service_manager.type for name, spec in node_specs(state).items()}
    for index, service in enumerate(state.services):
        if service.nodes and (missing := _unknown(service.nodes, known)):
            yield ("services", index, "nodes"), f"unknown nodes: {_names(missing)}"
        nodes = _selected(service.nodes, list(service.roles), roles)
        keys = [(name, service.name) for name in nodes]
        if clash := _claim(seen, keys, index):
            (name, _), other = clash
            yield ("services", index, "name"), f"service {service.name} on node {name} is also in services[{other}]"
            keys = keys[:keys.index(clash[0])]  # what this entry claimed before the clash
        if service.state == "stopped":
            stopped.update(dict.fromkeys(keys, index))
        if service.enabled is not None and (elsewhere := [n for n in nodes if managers.get(n) != "systemd"]):
            yield ("services", index, "enabled"), (f"enabled is for systemd nodes; {_names(elsewhere)} use "
                                                   f"{managers[elsewhere[0]]} (leave enabled out or null)")


def _other_owners(state: DesiredState) -> dict[str, str]:
    """Paths another part of the desired state writes, and which part: two writers of one file fight."""
    conf = state.cluster.config_dir.rstrip("/")
    owners = {f"{conf}/{name}": "cluster (the Slurm files)" for name in ("slurm.conf", "gres.conf", "cgroup.conf")}
    owners.update({"/etc/fstab": "storage.mounts", "/etc/exports": "storage.exports"})
    if state.munge is not None:
        owners["/etc/munge/munge.key"] = "munge:"
    for index, patch in enumerate(state.patches):
        owners.setdefault(patch.path, f"patches[{index}] ({patch.name})")
    for where, path in section_paths(state):
        owners.setdefault(path, f"{where[0]}[{where[1]}]")
    return owners


def _sections(state: DesiredState, known: set[str], roles: dict[str, set[str]]) -> Iterator[Problem]:
    """What every key declared with a Section gets (reconciler/model/base.py): its entries' nodes in the inventory,
    one entry writing a path per node."""
    for key, section, entries in sections(state):
        taken: dict[tuple[str, str], int] = {}
        for index, item in enumerate(entries):
            if item.nodes and (missing := _unknown(item.nodes, known)):
                yield (key, index, "nodes"), f"unknown nodes: {_names(missing)}"
            if section.writes is None:
                continue
            path = str(getattr(item, section.writes))
            if clash := _claim(taken, [(name, path) for name in _selected(item.nodes, list(item.roles), roles)],
                               index):
                (name, _), other = clash
                yield (key, index, section.writes), (f"{key}[{index}] and {key}[{other}] both write {path} on "
                                                     f"node {name}")


def _files(state: DesiredState, known: set[str], roles: dict[str, set[str]]) -> Iterator[Problem]:
    """Unknown nodes, one file per path and node, no restart or reload of a service declared stopped."""
    stopped: dict[tuple[str, str], int] = {}
    yield from _services(state, known, roles, stopped)
    taken: dict[tuple[str, str], int] = {}
    owners = _other_owners(state)
    for index, item in enumerate(state.files):
        if item.nodes and (missing := _unknown(item.nodes, known)):
            yield ("files", index, "nodes"), f"unknown nodes: {_names(missing)}"
        if item.path in owners:
            yield ("files", index, "path"), f"{item.path} is managed by {owners[item.path]}: not a place for files:"
        nodes = _selected(item.nodes, list(item.roles), roles)
        if clash := _claim(taken, [(name, item.path) for name in nodes], index):
            (name, _), other = clash
            if state.files[other].state != item.state:
                yield ("files", index, "state"), (f"files[{index}] wants {item.path} {item.state} and files[{other}] "
                                                  f"{state.files[other].state} on node {name}")
            else:
                yield ("files", index, "path"), (f"files[{index}] and files[{other}] both "
                                                 f"{'remove' if item.state == 'absent' else 'write'} {item.path} on "
                                                 f"node {name}")
        for number, (kind, target, _) in enumerate(item.notifications()):
            off = [n for n in nodes if (n, target) in stopped] if kind in ("restart", "reload") else []
            if off:
                yield ("files", index, "notify", number), (
                    f"{kind} {target}: the service is declared stopped on {_names(off)} "
                    f"(services[{stopped[(off[0], target)]}])")


# Parameters whose value is one absolute path on the node (Slurm wants them fully qualified).
PATH_PARAMS = frozenset({
    "StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile",
    "SlurmSchedLogFile", "Prolog", "Epilog", "PrologSlurmctld", "EpilogSlurmctld", "SrunProlog", "SrunEpilog",
    "TaskProlog", "TaskEpilog", "HealthCheckProgram", "RebootProgram", "ResumeProgram", "SuspendProgram",
    "ResumeFailProgram", "UnkillableStepProgram", "MailProg", "TmpFS", "JobCredentialPrivateKey",
    "JobCredentialPublicCertificate",
})


def _param_problems(file: str, scope: str, family: str, values: dict[str, SlurmScalar],
                    base: tuple[str | int, ...]) -> Iterator[Problem]:
    for key, value in values.items():
        try:
            value_rules.slurm_value(value)  # rendered into the file: one value Slurm reads back as written
            param = slurm_params.resolve(file, key, family, scope)
            slurm_params.coerce(param, value)
        except ValueError as exc:
            yield (*base, key), str(exc)
            continue
        if param.name in PATH_PARAMS and not str(value).startswith("/"):
            yield (*base, key), f"{param.name} must be an absolute path, got {value!r}"


# Schema keys that render a slurm.conf parameter of the same name: setting both would write it twice.
_TYPED_GLOBALS = {"Prolog": "prolog", "Epilog": "epilog", "HealthCheckProgram": "health_check",
                  "HealthCheckInterval": "health_check", "HealthCheckNodeState": "health_check"}


def _slurm_params(state: DesiredState) -> Iterator[Problem]:
    """Every Slurm parameter exists in the cluster's Slurm version and has a value of its type."""
    cluster = state.cluster
    family = cluster.slurm_version
    conf = ("cluster", "slurm_conf")
    yield from _param_problems("slurm.conf", "global", family, cluster.slurm_conf.written(), conf)
    for key in cluster.slurm_conf.written():
        param = slurm_params.lookup("slurm.conf", key)
        own = _TYPED_GLOBALS.get(param.name if param else key)
        if own and getattr(cluster, own) is not None:
            yield (*conf, key), f"{key} is also set by cluster.{own}: set it in one place"
    if cluster.cgroup is not None:
        yield from _param_problems("cgroup.conf", "global", family, cluster.cgroup.written(), ("cluster", "cgroup"))
    for index, node_set in enumerate(cluster.node_sets):
        yield from _param_problems("slurm.conf", "node", family, node_set.params,
                                   ("cluster", "node_sets", index, "params"))
    for index, part in enumerate(cluster.partitions):
        yield from _param_problems("slurm.conf", "partition", family, part.params,
                                   ("cluster", "partitions", index, "params"))
    if cluster.gres is not None:
        for index, line in enumerate(cluster.gres.lines):
            yield from _param_problems("gres.conf", "line", family, line.params,
                                       ("cluster", "gres", "lines", index, "params"))
    gres_types = str(cluster.slurm_conf.get("GresTypes") or "").lower().split(",")
    gpu_sets = [i for i, s in enumerate(cluster.node_sets)
                if s.gpus or any(k.lower() == "gres" and str(v).startswith("gpu") for k, v in s.params.items())]
    if gpu_sets and "gpu" not in gres_types:
        yield ("cluster", "node_sets", gpu_sets[0]), (
            "this node set has GPUs: set cluster.slurm_conf.GresTypes to a list holding gpu (slurm.conf needs it "
            "and nothing is added for you)")


def _accounting(state: DesiredState) -> Iterator[Problem]:
    """Parents, accounts and QOS referred to are declared (or are Slurm's own root and normal).

    Names declared twice are the loader's error (sectionmerge.duplicate_names: it has both places).
    """
    acct = state.accounting
    if acct is None:
        return
    accounts = {a.name for a in acct.accounts if a.state == "present"} | {"root"}
    qos = {q.name for q in acct.qos if q.state == "present"} | {"normal"}
    guessed: dict[tuple[str, int], str] = {}

    def near(name: str, known: set[str]) -> str:
        # once per unknown name: 20,000 users naming one missing account must not each search 2,000 names
        key = (name, id(known))
        if key not in guessed:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            guessed[key] = f" (did you mean {close[0]}?)" if close else ""
        return guessed[key]

    for index, account in enumerate(acct.accounts):
        if account.state == "present" and account.parent not in accounts:
            yield (("accounting", "accounts", index, "parent"),
                   f"parent {account.parent!r} is not an account here{near(account.parent, accounts)}")
    owner_lists: list[tuple[str, Sequence[AccountSpec | UserSpec]]] = [("accounts", acct.accounts),
                                                                        ("users", acct.users)]
    for kind, owners in owner_lists:
        for index, owner in enumerate(owners):
            if owner.state != "present":
                continue
            for field, names in (("qos", owner.qos or []), ("default_qos", [owner.default_qos] if owner.default_qos
                                                            else [])):
                for name in names:
                    if name not in qos:
                        yield (("accounting", kind, index, field), f"QOS {name!r} is not a QOS here{near(name, qos)}")
    for kind, owners in owner_lists:
        for index, owner in enumerate(owners):
            if owner.default_qos and owner.qos is not None and owner.default_qos not in owner.qos:
                # sacctmgr would refuse it without an error status ("don't have access to their default qos")
                yield (("accounting", kind, index, "default_qos"),
                       f"default QOS {owner.default_qos!r} is not in its qos list {owner.qos}")
    for index, spec in enumerate(acct.qos):
        for name in spec.preempt or []:
            if name not in qos:
                yield ("accounting", "qos", index, "preempt"), f"QOS {name!r} is not a QOS here{near(name, qos)}"
    for index, user in enumerate(acct.users):
        if user.state != "present":
            continue
        for field, names in (("default_account", [user.default_account]), ("accounts", user.accounts)):
            for name in names:
                if name not in accounts:
                    yield (("accounting", "users", index, field),
                           f"account {name!r} is not an account here{near(name, accounts)}")


def _fleet(state: DesiredState) -> Iterator[Problem]:
    """An RMA rule counting an XID that a node check ignores (xid_ignore: never reported, never drained on)."""
    ignored = {code: (index, check.name) for index, check in enumerate(state.checks.node) if check.gpus
               for code in check.gpus.xid_ignore}
    for index, rule in enumerate(state.checks.fleet.rma.xids):
        for position, code in enumerate(rule.codes):
            if code in ignored:
                at, name = ignored[code]
                yield (("checks", "fleet", "rma", "xids", index, "codes", position),
                       f"XID {code} is in the xid_ignore of node check {name!r} (checks.node[{at}].gpus.xid_ignore): "
                       "an XID never reported cannot make a GPU an RMA candidate; remove it from one of them")


def cross_check(state: DesiredState) -> list[Problem]:
    """Return every cross-reference problem as (key path, message)."""
    roles: dict[str, set[str]] = {}
    for entry in state.nodes:
        for name in hostlist.expand(entry.name):
            roles.setdefault(name, set()).update(entry.roles)
    known = set(roles)
    return [*_inventory(state), *_slurm(state, known), *_slurm_params(state), *_storage(state, known, roles),
            *_others(state, known), *_sections(state, known, roles), *_files(state, known, roles),
            *targets.refusals(state),
            *_accounting(state), *relations(state),
            *kernel_problems(state.kernel, roles, [item.path for item in state.files]),
            *upgrade_rules.problems(state, roles), *packagecheck.package_problems(state),
            *packagecheck.upgrade_problems(state), *lockouts(state), *_fleet(state)]
