"""Driver for sysctls (`kernel.sysctls:`): /etc/sysctl.d/90-reconciler.conf and each key's live value.

The file holds every value selected for the node, sorted, under our header (read at boot). Each key's live
value (/proc/sys/KEY with dots as slashes) is compared as sysctl prints it (whitespace-separated fields, one
space): a different one is set with `sysctl -w` (no consequence), unless its entry says `needs: reboot`: then the
change carries that need and sets nothing live. A key the node has no /proc/sys file for is an error naming key
and node, and nothing of the node's sysctls is written.
"""

from __future__ import annotations

import shlex

from reconciler.desired.managed import selects
from reconciler.drivers import kernel_live
from reconciler.drivers.base import file_change, is_ours
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.plan import NEEDS_TEXT, Change
from reconciler.engine.undo import Restore
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts
from reconciler.model.kernel import SYSCTL_FILE, sysctl_path
from reconciler.render.common import header

FACTS_KEY = "sysctls"


def set_command(key: str, value: str) -> str:
    """`sysctl -w key=value`, quoted for the shell."""
    return f"sysctl -w {shlex.quote(f'{key}={value}')}"


class SysctlsDriver(DriverDefaults):
    """Keeps sysctl values in sysctl.d and live."""

    name = "sysctls"
    phase = phase_of("sysctls")

    def wanted(self, ctx: Context, node: str) -> dict[str, tuple[str, bool]]:
        """key -> (value, needs a reboot) for NODE (two entries giving one key two values are a load error)."""
        out: dict[str, tuple[str, bool]] = {}
        for entry in ctx.state.kernel.sysctls:
            if selects(ctx.state, entry, node):
                for key, value in entry.values.items():
                    out.setdefault(key, (value, entry.needs == "reboot"))
        return out

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """The sysctl.d file (also when no value is wanted: ours is removed then) and each key's live value."""
        req.files.append(SYSCTL_FILE)
        kernel_live.ask(req, FACTS_KEY, [sysctl_path(key) for key in self.wanted(ctx, node)])

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """NODE's live values, kept as LiveSysctls."""
        kernel_live.absorb(FACTS_KEY, kernel_live.LiveSysctls, cluster, node, facts, commands)

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """The file change, then one change per key whose live value differs (or an error for a missing key)."""
        wanted = self.wanted(ctx, node)
        fact = facts.files.get(SYSCTL_FILE)
        if not wanted:
            if fact is not None and fact.exists and fact.content is not None and is_ours(fact.content):
                return [Change(
                    node=node, driver=self.name, resource=SYSCTL_FILE, action="delete", phase=self.phase,
                    summary=f"remove {SYSCTL_FILE} (no kernel.sysctls entry selects this node; live values are "
                            "left as they are)",
                    ops=[RunCommand(command=f"rm -f -- {SYSCTL_FILE}", description=f"remove {SYSCTL_FILE}")],
                    restore=Restore(summary=f"{SYSCTL_FILE} written back as it was",
                                    ops=[WriteFile(path=SYSCTL_FILE, content=fact.content, mode="0644")]))]
            return []
        live = kernel_live.live(ctx, kernel_live.LiveSysctls, node)
        if live is None:
            return [Change(node=node, driver=self.name, resource="sysctls", action="unknown", phase=self.phase,
                           summary="the live sysctl values were not gathered")]
        changes, errors = [], []
        for key, (value, reboot) in sorted(wanted.items()):
            path, resource = sysctl_path(key), f"sysctl {key}"
            current = live.get(path)
            if current is None or isinstance(current, dict):
                why = f"no such sysctl on {node} ({path} does not exist)" if current is None else \
                    f"{path} cannot be read on {node}: {current['error']}"
                errors.append(Change(node=node, driver=self.name, resource=resource, action="error",
                                     phase=self.phase, summary=f"{key}: {why}"))
                continue
            now = kernel_live.normalised(current)
            if now == value:
                changes.append(Change(node=node, driver=self.name, resource=resource, action="ok", phase=self.phase))
                continue
            summary = f"{key}: live {now or '(empty)'}, desired {value}"
            if reboot:  # takes effect at boot, from the file: nothing is set live
                changes.append(Change(node=node, driver=self.name, resource=resource, action="update",
                                      phase=self.phase, needs="reboot",
                                      summary=f"{summary} ({NEEDS_TEXT['reboot']}; set at boot from {SYSCTL_FILE})"))
                continue
            changes.append(Change(
                node=node, driver=self.name, resource=resource, action="update", phase=self.phase, summary=summary,
                ops=[RunCommand(command=set_command(key, value), description=f"set {key}")],
                restore=Restore(summary=f"{key} set back to {now}",
                                ops=[RunCommand(command=set_command(key, now), description=f"set {key} back")])))
        if errors:  # a key this node lacks: its file is not written either (it would fail at every boot)
            return errors
        desired = header("sysctls (kernel.sysctls)", ctx.source) + "".join(
            f"{key} = {value}\n" for key, (value, _) in sorted(wanted.items()))
        return [file_change(self.name, node, SYSCTL_FILE, fact, desired, phase=self.phase, ignore_header=True),
                *changes]
