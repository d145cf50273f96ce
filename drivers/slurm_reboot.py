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
    JOB_STATES,
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


def reboot_steps(controller: str, node: str, commit: str | None, reservation: bool = False,
                 requeue: list[str] | None = None) -> DrainSteps:
    """How the upgrade takes NODE out, reboots it through Slurm and brings it back (as data): the drain steps of
    every drain (node_state.drain_steps: the same jobs rule) with the upgrade's reason and the reboot's commands;
    RESERVATION: the reservation mode's commands; REQUEUE: partitions whose jobs are requeued, not waited for."""
    q = shlex.quote(node)
    show = f"scontrol show node -o {q}"
    drained = state_command(node, "DRAIN")
    ours = (f"{drained} && ! {show} | grep -qF ' NextState=' && "
            f"{show} | grep -qF {shlex.quote('Reason=' + UPGRADE_PREFIX)}")
    return drain_steps(controller, node, upgrade_reason(commit), ours).model_copy(update={
        "reboot": f"scontrol reboot {q}",
        "pending": state_command(node, "REBOOT"),
        "boot_id": BOOT_ID,
        "registered": f"{responding_command(node)} && ! {state_command(node, 'REBOOT')}",
        **(reservation_steps(node, requeue or []) if reservation else {}),
        **({"requeue": requeue_command(node, requeue)} if requeue else {})})


# Reservation mode (rollout.upgrade.mode: reservation; issue 46 item 3). Instead of a drain that leaves the node's
# free GPUs idle while its longest job runs, a maintenance reservation on the node that starts when its last job is
# expected to end (the jobs' EndTime, their start plus time limit), so that other jobs still run on it until then:
# what scontrol.1 suggests for a reboot ("You can alternately create an advanced reservation to prevent additional
# jobs from being initiated on nodes to be rebooted", the `reboot` section, 22.05, 24.11 and 26.05) and what
# slaclab's slurm-maint-controller does. From scontrol.1 (the same words in 22.05, 24.11 and 26.05): a new
# reservation needs StartTime, Duration (or EndTime), Nodes and Users; `Duration=UNLIMITED`; MAINT "receives special
# accounting treatment"; IGNORE_JOBS "ignore currently running jobs when creating the reservation" (without it a job
# still running at the start, e.g. one of `requeue`'s partitions, makes the creation fail). A running job is not
# ended when the reservation starts, and a job whose time limit would run into it does not start on the node
# (reservations.html: "no other jobs can use those resources"): both seen on the testbed, 22.05
# (tests/rollout/test_upgrade_reservation_testbed.py). A job without a time limit has no EndTime (squeue prints
# NONE): no reservation can start when it ends, and the node is drained instead, as in drain mode.
RESERVATION_PREFIX = "reconciler-upgrade-"
_DATE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$"


def reservation_name(node: str) -> str:
    """The maintenance reservation of NODE's upgrade."""
    return f"{RESERVATION_PREFIX}{node}"


def _outside(requeue: list[str]) -> str:
    """awk program printing $1 of the lines whose $2 (a partition) is not in REQUEUE."""
    skip = "," + ",".join(requeue) + ","
    return f"awk -v skip={shlex.quote(skip)} 'index(skip, \",\" $2 \",\") == 0 {{print $1}}'"


def reservation_steps(node: str, requeue: list[str]) -> dict[str, str]:
    """The reservation part of NODE's steps (engine/drain.py DrainSteps): create it to start when the node's jobs
    outside REQUEUE's partitions end, see it started, delete it; the jobs the upgrade waits for."""
    q, name = shlex.quote(node), shlex.quote(reservation_name(node))
    show = f"scontrol show reservation {name} -o"
    start = f"{show} | grep -o 'ReservationName=[^ ]* StartTime=[^ ]*' | sed 's/[A-Za-z]*=//g'"
    ends = f"squeue -h -w {q} -t {JOB_STATES} -o '%e %P' | {_outside(requeue)}"
    reserve = (f"if {show} >/dev/null 2>&1; then {start}; exit 0; fi; ends=$({ends}); "
               f"if printf '%s\\n' \"$ends\" | grep -v '^$' | grep -qvE '{_DATE}'; then "
               f"echo 'drain: a job on {node} has no time limit (squeue EndTime NONE): no reservation can start when "
               "it ends'; exit 0; fi; now=$(date +%Y-%m-%dT%H:%M:%S); "
               "last=$(printf '%s\\n' \"$now\" $ends | sort | tail -n1); "
               "if [ \"$last\" = \"$now\" ]; then last=now; fi; "
               f"scontrol create reservation ReservationName={name} Nodes={q} StartTime=\"$last\" "
               f"Duration=UNLIMITED Users=root Flags=MAINT,IGNORE_JOBS >/dev/null && {start}")
    return {"reserve": reserve, "reserved": f"{show} | grep -q ' State=ACTIVE'",
            "unreserve": f"! {show} >/dev/null 2>&1 || scontrol delete ReservationName={name}",
            "kept_jobs": f"squeue -h -w {q} -t {JOB_STATES} -o '%A %P' | {_outside(requeue)}"}


def requeue_command(node: str, partitions: list[str]) -> str:
    """Requeues NODE's jobs of PARTITIONS (never others); prints `requeued ID` or `kept ID: why` per job.
    scontrol.1 (22.05, 24.11, 26.05): requeue puts "a running, suspended or finished Slurm batch job into pending
    state"; an interactive job, or one submitted with --no-requeue, is refused: it is kept and waited for."""
    where = shlex.quote(",".join(partitions))
    return (f"for j in $(squeue -h -w {shlex.quote(node)} -p {where} -t RUNNING,CONFIGURING,SUSPENDED -o %A); do "
            "if out=$(scontrol requeue \"$j\" 2>&1); then echo \"requeued $j\"; "
            "else echo \"kept $j: $(printf '%s' \"$out\" | tr '\\n' ' ')\"; fi; done")


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
