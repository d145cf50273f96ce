"""The Slurm side of an upgrade, as data: how a node is drained, rebooted through Slurm's RebootProgram, seen
back and resumed (`DrainSteps` with its reboot part: engine/drain.py), and how its driver stack is reloaded
without a reboot (`ReloadSteps`).

Slurm 22.05 refuses `scontrol reboot ... nextstate=DRAIN`, and an ASAP reboot clears the DRAIN flag: so the node
is drained first with a `reconciler: upgrade <commit>` reason, and the plain `scontrol reboot NODE` is issued once
its jobs are gone; Slurm reboots it and it comes back still drained (`... : reboot issued`), ready for the gates.

A drain is the upgrade's own only while no ASAP reboot holds it (no `NextState=`: the upgrade never asks for one).
Slurm 24.11 keeps a resumed drain's Reason until a job starts on the node, and an admin's `scontrol reboot ASAP`
without a reason then keeps that old Reason (`reconciler: upgrade ... : reboot issued`) instead of setting "Reboot
ASAP" as scontrol.1 of 24.11 says: seen on the testbed, 24.11.5; we follow the observation. Read by Reason alone,
that drain (which Slurm lifts itself after the reboot: `NextState=UNDRAIN`) was the upgrade's, to use and to resume
(tests/rollout/test_upgrade_asap_testbed.py).
"""

from __future__ import annotations

import shlex

from reconciler.drivers.node_state import (
    UPGRADE_PREFIX,
    drain_command,
    drain_steps,
    responding_command,
    state_command,
)
from reconciler.engine.drain import DrainSteps
from reconciler.engine.upgrade_steps import ReloadSteps
from reconciler.facts.services import control_command
from reconciler.model import ServiceManager
from reconciler.model.upgrade import DriverReload

BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


def upgrade_reason(commit: str | None) -> str:
    """The drain reason of a node under upgrade to COMMIT."""
    return f"{UPGRADE_PREFIX} {str(commit or 'local')[:12]}"


def failed_reason(commit: str | None, why: str) -> str:
    """The drain reason a node keeps when its upgrade failed (one line, bounded)."""
    text = " ".join(why.split())
    return f"{upgrade_reason(commit)} failed: {text}"[:240]


def reboot_steps(controller: str, node: str, commit: str | None) -> DrainSteps:
    """How the upgrade takes NODE out, reboots it through Slurm and brings it back (as data): the drain steps of
    every drain (node_state.drain_steps: the same jobs rule) with the upgrade's reason and the reboot's commands."""
    q = shlex.quote(node)
    show = f"scontrol show node -o {q}"
    drained = state_command(node, "DRAIN")
    ours = (f"{drained} && ! {show} | grep -qF ' NextState=' && "
            f"{show} | grep -qF {shlex.quote('Reason=' + UPGRADE_PREFIX)}")
    return drain_steps(controller, node, upgrade_reason(commit), ours).model_copy(update={
        "reboot": f"scontrol reboot {q}",
        "pending": state_command(node, "REBOOT"),
        "boot_id": BOOT_ID,
        "registered": f"{responding_command(node)} && ! {state_command(node, 'REBOOT')}"})


def fail_command(node: str, commit: str | None, why: str) -> str:
    """Keeps NODE drained, its reason saying why its upgrade failed."""
    return drain_command(node, failed_reason(commit, why))


def reload_steps(reload: DriverReload, manager: ServiceManager) -> ReloadSteps:
    """Stop the services, unload the modules in order (those loaded), load them back in reverse, start the
    services (under the node's service manager)."""
    q = shlex.quote
    commands = [control_command(manager, "stop", s) for s in reload.stop]
    commands += [f"if [ -d /sys/module/{q(m.replace('-', '_'))} ]; then modprobe -r {q(m)}; fi" for m in reload.modules]
    commands += [f"modprobe {q(m)}" for m in reversed(reload.modules)]
    commands += [control_command(manager, "start", s) for s in reload.start]
    return ReloadSteps(commands=commands)


def installed_version_command(package: str) -> str:
    """Prints PACKAGE's installed version (dpkg's, else rpm's); empty when it is not installed."""
    q = shlex.quote(package)
    return (f"v=$(dpkg-query -W -f='${{db:Status-Status}} ${{Version}}' {q} 2>/dev/null | sed -n 's/^installed //p'); "
            f"[ -n \"$v\" ] || v=$(rpm -q --qf '%{{VERSION}}' {q} 2>/dev/null | grep -v 'not installed'); "
            "printf '%s\\n' \"$v\"")


def upstream(version: str) -> str:
    """The upstream part of a package version, as the driver prints it: `1:570.86.15-1` -> `570.86.15`."""
    text = version.strip().split(":", 1)[-1]
    return text.rsplit("-", 1)[0] if "-" in text else text
