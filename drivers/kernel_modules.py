"""Driver for kernel modules (`kernel.modules:`): modprobe.d files, loading, unloading, live option values.

Per module and node: /etc/modprobe.d/reconciler-NAME.conf holds `blacklist NAME` + `install NAME /bin/false`
(state blacklisted) and `options NAME k=v ...`; a module to load that is not in /sys/module is loaded with
`modprobe NAME` (no consequence). What only a reload can change is declared, never done silently: a blacklisted
module that is loaded now is unloaded (`modprobe -r`), and a loaded module whose live parameter
(/sys/module/NAME/parameters/KEY) differs from its option is reloaded (`modprobe -r NAME && modprobe NAME`);
both changes carry `needs: driver-reload`, so the Applier holds them unless `apply --allow driver-reload`.
A module built into the kernel (in /sys/module without initstate) can be neither unloaded nor given options
by modprobe.d: an error change says so. A reconciler-*.conf of ours that no module names any more is removed.
"""

from __future__ import annotations

import shlex

from reconciler.desired.managed import selects
from reconciler.drivers import kernel_live
from reconciler.drivers.base import file_change, is_ours
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import Op, RunCommand, WriteFile
from reconciler.engine.plan import NEEDS_TEXT, Action, Change, Needs
from reconciler.engine.undo import Restore
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts
from reconciler.model.kernel import MODULES_DIR, KernelModule, module_file, sysfs_name
from reconciler.render.common import header

FACTS_KEY = "kernel_modules"
RELOAD = NEEDS_TEXT["driver-reload"]
# sysfs shows a bool parameter as Y/N; modprobe.d takes 1/0, y/n, Y/N as well
_BOOL = {"y": "Y", "1": "Y", "n": "N", "0": "N"}


def sys_dir(name: str) -> str:
    """The module's /sys/module directory (present while it is loaded, or built in)."""
    return f"/sys/module/{sysfs_name(name)}"


def same_value(live: str, desired: str) -> bool:
    """True when a parameter's sysfs text means the desired option value (Y for 1, N for 0 on a bool)."""
    text = live.strip()
    if text == desired:
        return True
    return text in ("Y", "N") and _BOOL.get(desired.lower()) == text


def file_content(module: KernelModule, source: str) -> str | None:
    """The module's modprobe.d file, or None when it needs none (no options, not blacklisted)."""
    lines = []
    if module.state == "blacklisted":
        lines += [f"blacklist {module.name}", f"install {module.name} /bin/false"]
    if module.options:
        lines.append(f"options {module.name} " + " ".join(f"{k}={v}" for k, v in module.options.items()))
    if not lines:
        return None
    return header(f"kernel module {module.name}", source) + "\n".join(lines) + "\n"


def modprobe(name: str, remove: bool = False) -> str:
    """The modprobe command line loading (or with REMOVE unloading) NAME."""
    return f"modprobe {'-r ' if remove else ''}{shlex.quote(name)}"


class KernelModulesDriver(DriverDefaults):
    """Keeps kernel modules loaded or blacklisted with their options; declares what needs a driver reload."""

    name = "kernel_modules"
    phase = phase_of("kernel_modules")

    def _modules(self, ctx: Context, node: str) -> list[KernelModule]:
        return [item for item in ctx.state.kernel.modules if selects(ctx.state, item, node)]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Each module's file, /sys/module entry, initstate and option values; our reconciler-*.conf files."""
        paths = []
        for module in self._modules(ctx, node):
            req.files.append(module_file(module.name))
            base = sys_dir(module.name)
            paths += [base, f"{base}/initstate", *(f"{base}/parameters/{key}" for key in module.options)]
        req.python[FACTS_KEY] = kernel_live.snippet(paths, (MODULES_DIR, "reconciler-", ".conf"))

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """The live values (and our modprobe.d files) of NODE, kept as LiveModules."""
        kernel_live.absorb(FACTS_KEY, kernel_live.LiveModules, cluster, node, facts, commands)

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Per module its file change and its load, unload or reload; then our files no module names."""
        live = kernel_live.live(ctx, kernel_live.LiveModules, node)
        changes: list[Change] = []
        wanted = set()
        for module in self._modules(ctx, node):
            path = module_file(module.name)
            wanted.add(path)
            desired = file_content(module, ctx.source)
            fact = facts.files.get(path)
            if desired is not None:
                changes.append(file_change(self.name, node, path, fact, desired, phase=self.phase,
                                           ignore_header=True))
            elif fact is not None and fact.exists and fact.content is not None and is_ours(fact.content):
                changes.append(self._remove(node, path, fact.content, f"kernel.modules names no options for "
                                            f"{module.name} and does not blacklist it"))
            changes += self._live(node, module, live)
        listed = (live or {}).get("listing") or {}
        for path in sorted(set(listed) - wanted):
            if is_ours(listed[path]):
                changes.append(self._remove(node, path, listed[path], "no entry of kernel.modules names its module "
                                            "on this node; whether the module is loaded is left as it is"))
        return changes

    def _remove(self, node: str, path: str, content: str, why: str) -> Change:
        return Change(node=node, driver=self.name, resource=path, action="delete", phase=self.phase,
                      summary=f"remove {path} ({why})",
                      ops=[RunCommand(command=f"rm -f -- {shlex.quote(path)}", description=f"remove {path}")],
                      restore=Restore(summary=f"{path} written back as it was",
                                      ops=[WriteFile(path=path, content=content, mode="0644")]))

    def _live(self, node: str, module: KernelModule, live: dict | None) -> list[Change]:
        """The module's load, unload or reload, from its live state."""
        name, base = module.name, sys_dir(module.name)
        resource = f"module {name}"

        def change(action: Action, summary: str, ops: list[Op] | None = None, restore: Restore | None = None,
                   needs: Needs | None = None) -> Change:
            return Change(node=node, driver=self.name, resource=resource, action=action, phase=self.phase,
                          summary=summary, ops=ops or [], restore=restore, needs=needs)

        if live is None:
            return [change("unknown", f"the live state of module {name} was not gathered")]
        state = live.get(base)
        if isinstance(state, dict):
            return [change("error", f"{base}: {state['error']}")]
        loaded = state is not None
        builtin = loaded and live.get(f"{base}/initstate") is None
        if not loaded:
            if module.state != "loaded":
                return [change("ok", "")]
            return [change("create", f"load {name} (modprobe {name})", ops=[RunCommand(
                command=modprobe(name), description=f"load {name}")], restore=Restore(
                summary=f"{name} unloaded again (not loaded before)", check=f"[ ! -d {shlex.quote(base)} ]",
                ops=[RunCommand(command=modprobe(name, remove=True), description=f"unload {name}")]))]
        if module.state == "blacklisted":
            if builtin:
                return [change("error", f"{name} is built into the kernel: it cannot be unloaded or blacklisted by "
                                        f"modprobe.d (use the kernel command line: module_blacklist={name})")]
            return [change("update", f"unload {name} (blacklisted; loaded now) ({RELOAD})", needs="driver-reload",
                           ops=[RunCommand(command=modprobe(name, remove=True), description=f"unload {name}")],
                           restore=Restore(summary=f"{name} loaded again (it was loaded before)",
                                           check=f"[ -d {shlex.quote(base)} ]",
                                           ops=[RunCommand(command=modprobe(name), description=f"load {name}")]))]
        differ: list[str] = []
        unseen: list[str] = []
        for key, want in module.options.items():
            value = live.get(f"{base}/parameters/{key}")
            if isinstance(value, str):
                if not same_value(value, want):
                    differ.append(f"{key}: live {kernel_live.normalised(value) or '(empty)'}, desired {want}")
            else:
                unseen.append(key)
        changes: list[Change] = []
        if unseen:
            changes.append(Change(
                node=node, driver=self.name, resource=f"{resource} parameters", action="unknown", phase=self.phase,
                summary=f"{name} {', '.join(unseen)}: no live value ({base}/parameters/ does not show "
                        f"{'it' if len(unseen) == 1 else 'them'}: not a parameter of the module, or not readable)"))
        if not differ:
            return [*changes, change("ok", "")]
        if builtin:
            return [*changes, change("error", f"{name} {'; '.join(differ)}: {name} is built into the kernel; its "
                                              f"options take effect from the kernel command line only")]
        reload = f"{modprobe(name, remove=True)} && {modprobe(name)}"
        return [*changes, change(
            "update", f"{name} {'; '.join(differ)} ({RELOAD})", needs="driver-reload",
            ops=[RunCommand(command=reload, description=f"reload {name} (its options changed)")],
            restore=Restore(summary=f"{name} reloaded again (with the options its restored file gives)",
                            ops=[RunCommand(command=reload, description=f"reload {name}")]))]
