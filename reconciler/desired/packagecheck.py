"""Checks across `packages:`, `kernel:`, `services:` and `rollout.upgrade` that no single entry can make.

- `packages:` names only inventory nodes; two entries selecting one node want the same thing for a package they
  both name (spec and allow_downgrade: the plan would otherwise refuse the node's whole transaction, or pick one);
- `rollout.upgrade` names what exists and is used: `driver_package` is a package of `packages:` (the gpu gate
  compares the loaded driver with its installed version) and the gpu gate is on, `dcgm_level` has the dcgm gate,
  a module the driver reload loads is not blacklisted where a reload happens, a service it stops is started again
  (by `start`, or by `services:` on every node that reloads) and one it starts is not declared stopped there, and
  a change that needs a driver reload has a reload that does something.
Each problem is (key path, message), reported at the key's file:line by the loader.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator

from reconciler.common import hostlist
from reconciler.desired.inventory import node_specs
from reconciler.desired.managed import selected
from reconciler.model import DesiredState
from reconciler.model.kernel import sysfs_name
from reconciler.model.packages import PackageSpec
from reconciler.model.upgrade import gate_label

Problem = tuple[tuple[str | int, ...], str]
UPGRADE = ("rollout", "upgrade")


def _shown(nodes: list[str]) -> str:
    return hostlist.compress(nodes[:64]) + (f" and {len(nodes) - 64} more" if len(nodes) > 64 else "")


def _wants(spec: PackageSpec, allow_downgrade: bool) -> str:
    """What an entry wants for a package, in the YAML's words."""
    parts = [spec.version]
    if spec.hold is not None:
        parts.append(f"hold: {str(spec.hold).lower()}")
    if spec.needs is not None:
        parts.append(f"needs: {spec.needs}")
    if allow_downgrade and spec.pinned:
        parts.append("allow_downgrade: true")
    return ", ".join(parts)


def package_problems(state: DesiredState) -> Iterator[Problem]:
    """Unknown nodes; one package wanted two ways on one node (once per entry and package)."""
    specs = node_specs(state)
    first: dict[tuple[str, str], tuple[int, str]] = {}
    said: set[tuple[int, str]] = set()
    for index, entry in enumerate(state.packages):
        if entry.nodes and (missing := [n for n in hostlist.expand(entry.nodes) if n not in specs]):
            yield ("packages", index, "nodes"), f"unknown nodes: {_shown(missing)}"
        nodes = selected(state, entry)
        for name, spec in entry.packages.items():
            wants = _wants(spec, entry.allow_downgrade)
            for node in nodes:
                other, was = first.setdefault((node, name), (index, wants))
                if was != wants and (index, name) not in said:
                    said.add((index, name))
                    yield ("packages", index, "packages", name), (
                        f"{name} on node {node} is {was!r} in packages[{other}] and {wants!r} here: one package, "
                        f"one wish per node (the plan would refuse the node's whole package transaction)")


def _needs(state: DesiredState) -> tuple[set[str], list[tuple[int, str]]]:
    """The nodes where a change may need a driver reload (a package `needs: driver-reload`, a module's options),
    and the (packages index, name) of each package that says so."""
    nodes: set[str] = set()
    asking: list[tuple[int, str]] = []
    for index, entry in enumerate(state.packages):
        names = [n for n, s in entry.packages.items() if s.needs == "driver-reload"]
        if names:
            asking += [(index, n) for n in names]
            nodes.update(selected(state, entry))
    for module in state.kernel.modules:
        if module.options:
            nodes.update(selected(state, module))
    return nodes, asking


def _driver_package(state: DesiredState) -> Iterator[Problem]:
    upgrade = state.rollout.upgrade
    if upgrade is None or upgrade.driver_package is None:
        return
    name, where = upgrade.driver_package, (*UPGRADE, "driver_package")
    if "gpu" not in upgrade.gates:
        yield where, ("the gpu gate compares the loaded driver with driver_package's installed version, and gates "
                      "has no gpu: add gpu to gates or drop driver_package")
        return
    wanted = [s.version for e in state.packages for n, s in e.packages.items() if n == name]
    if not wanted:
        named = sorted({n for e in state.packages for n in e.packages})
        close = difflib.get_close_matches(name, named, n=1, cutoff=0.6)
        yield where, (f"driver_package {name!r} is in no packages: entry: the gpu gate would find it not installed "
                      "and fail every upgraded node" + (f" (did you mean {close[0]}?)" if close else ""))
    elif all(v == "absent" for v in wanted):
        yield where, (f"driver_package {name!r} is removed by every packages: entry naming it: the gpu gate would "
                      "find it not installed and fail every upgraded node")


def _reload(state: DesiredState) -> Iterator[Problem]:
    upgrade = state.rollout.upgrade
    if upgrade is None:
        return
    reload = upgrade.driver_reload
    nodes, asking = _needs(state)
    if asking and not (reload.stop or reload.modules or reload.start):
        index, name = asking[0]
        yield ("packages", index, "packages", name, "needs"), (
            f"{name} needs a driver reload, and rollout.upgrade.driver_reload stops, unloads and starts nothing: "
            "the upgrade would load nothing new (name the modules, e.g. modules: [nvidia_uvm, nvidia])")
    if not nodes:
        return
    blacklisted: dict[str, tuple[int, list[str]]] = {}
    for index, module in enumerate(state.kernel.modules):
        if module.state == "blacklisted" and (on := [n for n in selected(state, module) if n in nodes]):
            blacklisted.setdefault(sysfs_name(module.name), (index, on))
    for j, name in enumerate(reload.modules):
        if (found := blacklisted.get(sysfs_name(name))) is not None:
            yield (*UPGRADE, "driver_reload", "modules", j), (
                f"the driver reload loads {name}, which kernel.modules[{found[0]}] blacklists on {_shown(found[1])} "
                "(where a change needs a driver reload): `modprobe` would fail there, after the unload")
    yield from _reload_services(state, nodes)


def _reload_services(state: DesiredState, nodes: set[str]) -> Iterator[Problem]:
    """A service the reload stops is started again; one it starts is not declared stopped on a reloading node."""
    reload = state.rollout.upgrade.driver_reload  # type: ignore[union-attr]  # _reload's caller checked
    running: dict[str, set[str]] = {}
    stopped: dict[str, tuple[int, list[str]]] = {}
    for index, service in enumerate(state.services):
        on = [n for n in selected(state, service) if n in nodes]
        if service.state == "running":
            running.setdefault(service.name.removesuffix(".service"), set()).update(on)
        elif on:
            stopped.setdefault(service.name.removesuffix(".service"), (index, on))
    starts = {s.removesuffix(".service") for s in reload.start}
    for j, name in enumerate(reload.stop):
        unit = name.removesuffix(".service")
        if unit not in starts and not nodes <= running.get(unit, set()):
            yield (*UPGRADE, "driver_reload", "stop", j), (
                f"the driver reload stops {name} and never starts it again (not in start, and services: does not "
                f"keep it running on every node whose changes need a driver reload): add it to start")
    for j, name in enumerate(reload.start):
        if (found := stopped.get(name.removesuffix(".service"))) is not None:
            yield (*UPGRADE, "driver_reload", "start", j), (
                f"the driver reload starts {name}, which services[{found[0]}] wants stopped on {_shown(found[1])}")


def _dcgm(state: DesiredState) -> Iterator[Problem]:
    upgrade = state.rollout.upgrade
    if upgrade is not None and "dcgm_level" in upgrade.model_fields_set and "dcgm" not in upgrade.gates:
        yield (*UPGRADE, "dcgm_level"), ("dcgm_level is the dcgm gate's level, and gates has no dcgm: add dcgm or "
                                         "drop dcgm_level")


def _nhc(state: DesiredState) -> Iterator[Problem]:
    upgrade = state.rollout.upgrade
    if upgrade is not None and "nhc_timeout" in upgrade.model_fields_set and "nhc" not in upgrade.gates:
        yield (*UPGRADE, "nhc_timeout"), ("nhc_timeout is the nhc gate's watchdog, and gates has no nhc: add nhc "
                                          "or drop nhc_timeout")


def _gates_twice(state: DesiredState) -> Iterator[Problem]:
    """A gate listed twice would run twice; two command gates of one name could not be told apart in a reason."""
    upgrade = state.rollout.upgrade
    seen: dict[str, int] = {}
    for j, gate in enumerate(upgrade.gates if upgrade is not None else []):
        label = gate_label(gate)
        if label in seen:
            yield (*UPGRADE, "gates", j), (f"gate {label} is listed twice (first at gates[{seen[label]}])"
                                           + ("; tell command gates apart with `name:`" if label != gate else ""))
        seen.setdefault(label, j)


def _min_available(state: DesiredState) -> Iterator[Problem]:
    """min_available names partitions slurm.conf has, each asking for no more nodes than it has."""
    upgrade = state.rollout.upgrade
    if upgrade is None:
        return
    sizes: dict[str, int | None] = {}
    for partition in state.cluster.partitions:
        text = (partition.nodes or "").strip()
        sizes[partition.name] = None if text.upper() == "ALL" else len(hostlist.expand(text)) if text else 0
    for name, want in upgrade.min_available.items():
        where = (*UPGRADE, "min_available", name)
        if name not in sizes:
            yield where, _no_partition(name, sizes)
        elif isinstance(want, int) and sizes[name] is not None and want > (sizes[name] or 0):
            yield where, (f"min_available {want} of partition {name}, which has {sizes[name]} node(s): no node of it "
                          "could ever go out")


def _no_partition(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return (f"no partition {name!r} in cluster.partitions"
            + (f" (did you mean {close[0]}?)" if close else f" (there: {', '.join(sorted(known))})"))


def _requeue(state: DesiredState) -> Iterator[Problem]:
    """requeue names partitions slurm.conf has, each once."""
    upgrade = state.rollout.upgrade
    if upgrade is None:
        return
    known = {partition.name for partition in state.cluster.partitions}
    seen: set[str] = set()
    for i, name in enumerate(upgrade.requeue):
        if name not in known:
            yield (*UPGRADE, "requeue", i), _no_partition(name, known)
        elif name in seen:
            yield (*UPGRADE, "requeue", i), f"partition {name} is listed twice"
        seen.add(name)


def _windows(state: DesiredState) -> Iterator[Problem]:
    rollout = state.rollout
    if "windows_apply_to" in rollout.model_fields_set and not rollout.windows:
        yield ("rollout", "windows_apply_to"), ("windows_apply_to says what rollout.windows hold, and there are no "
                                                "windows: add windows or drop windows_apply_to")
    seen: dict[str, int] = {}
    for j, window in enumerate(rollout.windows):
        text = window.span().text()
        if text in seen:
            yield ("rollout", "windows", j), f"the same window as windows[{seen[text]}] ({text})"
        seen.setdefault(text, j)


def upgrade_problems(state: DesiredState) -> list[Problem]:
    """What `rollout.upgrade` names that does not exist, is not used, or works against the rest of the state."""
    return [*_driver_package(state), *_reload(state), *_dcgm(state), *_nhc(state), *_gates_twice(state),
            *_windows(state), *_min_available(state), *_requeue(state)]
