"""The shell steps around a Slurm package transaction: the daemons stopped, backed up and (re)started in Slurm's
upgrade order, each waited for until it answers at its new version.

Slurm's upgrade guide (https://slurm.schedmd.com/upgrades.html, "Upgrade procedure", read for 24.11 and 26.05):
shut slurmdbd down, back the database up, upgrade it, start it (it converts the database; "this may take a long
time"); then shut slurmctld down, back StateSaveLocation up, upgrade it, start it; then slurmd (running jobs go on:
"slurmd can be upgraded while jobs are running"). Debian's own maintainer scripts would restart each daemon the
moment dpkg configures its package (`deb-systemd-invoke restart` in slurmdbd's, slurmctld's and slurmd's postinst,
26.05.5-1): on a node carrying slurmdbd and slurmctld that restarts slurmctld before slurmdbd has converted, and it
restarts slurmdbd under systemd's start timeout. So the apt transaction runs with a policy-rc.d that refuses those
three (exit 101, which invoke-rc.d and deb-systemd-invoke obey) and asks the node's own policy-rc.d, if any, about
every other service; the steps below start the daemons in order. Observed on the testbed (Debian 13 nodes, 24.11.5
to 26.05.5, tests/rollout/test_slurm_major_upgrade_testbed.py).
"""

from __future__ import annotations

import shlex

from reconciler.engine.ops import RunCommand
from reconciler.facts.services import control_command
from reconciler.model import ServiceManager

POLICY = "/usr/sbin/policy-rc.d"  # the fixed path invoke-rc.d and deb-systemd-invoke ask (init-system-helpers)
ASIDE = POLICY + ".reconciler-aside"  # the node's own policy-rc.d while ours is in place
MARK = "reconciler: Slurm daemons start in the upgrade's order"
DAEMONS = ("slurmdbd", "slurmctld", "slurmd")
STATE_DEFAULT = "/var/spool"  # slurm.conf(5), 24.11 and 26.05: StateSaveLocation "The default value is /var/spool"
POLL = 2


def without_daemon_restarts(command: str, policy: str = POLICY) -> str:
    """Shell: COMMAND (an apt transaction) with dpkg's maintainer scripts kept from (re)starting the Slurm daemons;
    the node's own policy-rc.d is moved aside and asked about every other service, and put back whatever happens
    (a leftover of ours from a killed run is replaced, never taken for the node's own). POLICY: tests only."""
    aside = policy + ASIDE.removeprefix(POLICY)
    p, a = shlex.quote(policy), shlex.quote(aside)
    names = "|".join(f"{d}|{d}.service" for d in DAEMONS)
    lines = ["#!/bin/sh", f"# {MARK}", f'for w in "$@"; do case "$w" in {names}) exit 101;; esac; done',
             f'[ -x {aside} ] && exec {aside} "$@"', "exit 0"]
    script = " ".join(shlex.quote(line) for line in lines)
    return (f"if [ ! -e {a} ] && {{ [ -e {p} ] || [ -L {p} ]; }} && ! grep -qF {shlex.quote(MARK)} {p} 2>/dev/null; "
            f"then mv {p} {a} || exit 1; fi; "
            f"printf '%s\\n' {script} > {p}.new && chmod 755 {p}.new && mv {p}.new {p} || exit 1; "
            f"put_back() {{ rm -f {p}; if [ -e {a} ] || [ -L {a} ]; then mv {a} {p}; fi; }}; trap put_back EXIT; "
            f"( {command} ); rc=$?; put_back; trap - EXIT; exit $rc")


def _gone(manager: ServiceManager, service: str) -> str:
    """Shell exiting 0 when the service manager gave SERVICE up (no point waiting on)."""
    if manager.type == "supervisord":
        return f"supervisorctl status {service} 2>/dev/null | grep -Eq '^{service} +(FATAL|EXITED|STOPPED) '"
    if manager.type == "systemd":
        return f"systemctl is-failed --quiet {service}"
    return "false"


def _wait(check: str, gone: str, timeout: int, what: str) -> str:
    """Shell: poll CHECK until it exits 0; fail with WHAT once GONE says the daemon died or TIMEOUT passed."""
    return (f"end=$(( $(date +%s) + {timeout} )); until {check}; do "
            f"if {gone}; then echo {shlex.quote(what + ': the daemon stopped')} >&2; exit 1; fi; "
            f"if [ $(date +%s) -ge $end ]; then echo {shlex.quote(f'{what}: not after {timeout}s')} >&2; exit 1; fi; "
            f"sleep {POLL}; done")


def stop(manager: ServiceManager, service: str) -> RunCommand:
    """Stop SERVICE (a stopped one stays stopped: exit 0)."""
    return RunCommand(command=control_command(manager, "stop", service), description=f"stop {service}")


def guarded(command: str, description: str) -> RunCommand:
    """The apt transaction, the Slurm daemons kept from starting (without_daemon_restarts)."""
    return RunCommand(command=without_daemon_restarts(command), description=description)


def start_slurmdbd(manager: ServiceManager, version: str, timeout: int) -> list[RunCommand]:
    """Start slurmdbd and wait (up to TIMEOUT: the database conversion) until it answers sacctmgr."""
    check = "sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1"
    what = f"slurmdbd {version} did not answer (sacctmgr show cluster)"
    return [RunCommand(command=control_command(manager, "start", "slurmdbd"), description="start slurmdbd"),
            RunCommand(command=_wait(check, _gone(manager, "slurmdbd"), timeout, what), timeout=timeout + 60,
                       description=f"wait for slurmdbd {version} (its database conversion)")]


def state_location(conf: str) -> str:
    """Shell setting $d to slurmctld's StateSaveLocation, read from CONF (Slurm's default when unset)."""
    return (f"d=$(sed -n 's/^[Ss][Tt][Aa][Tt][Ee][Ss][Aa][Vv][Ee][Ll][Oo][Cc][Aa][Tt][Ii][Oo][Nn]=//p' "
            f"{shlex.quote(conf)} 2>/dev/null | tail -n1); d=${{d:-{STATE_DEFAULT}}}")


def backup_state(conf: str, directory: str, old: str, new: str) -> RunCommand:
    """Archive StateSaveLocation (slurmctld stopped) into DIRECTORY; prints the archive's path."""
    # the name is fixed once: a `$(date)` in each of tar and mv named two files when the second ticked between them
    # (seen on the testbed: `mv: cannot stat '...T163318Z.tar.gz.part'`)
    name = shlex.quote(f"{directory}/statesave-{old}-to-{new}-") + "\"$(date -u +%Y%m%dT%H%M%SZ).tar.gz\""
    return RunCommand(command=(f"{state_location(conf)}; mkdir -p {shlex.quote(directory)} && f={name} && "
                               f"tar -C \"$d\" -czf \"$f.part\" . && mv \"$f.part\" \"$f\" && "
                               f"echo \"$d -> $f\""),
                      description=f"back up slurmctld's StateSaveLocation into {directory}")


def start_slurmctld(manager: ServiceManager, upstream: str, timeout: int) -> list[RunCommand]:
    """Start slurmctld and wait until it answers a ping and reports UPSTREAM (SLURM_VERSION)."""
    check = ("scontrol ping 2>/dev/null | grep -q 'is UP' && scontrol show config 2>/dev/null | "
             f"grep -Eq '^SLURM_VERSION *= *{upstream}$'")
    what = f"slurmctld {upstream} did not answer"
    return [RunCommand(command=control_command(manager, "start", "slurmctld"), description="start slurmctld"),
            RunCommand(command=_wait(check, _gone(manager, "slurmctld"), timeout, what), timeout=timeout + 60,
                       description=f"wait for slurmctld {upstream}")]


def restart_slurmd(manager: ServiceManager, node: str, upstream: str, timeout: int) -> list[RunCommand]:
    """Restart slurmd (its running jobs go on) and wait until slurmctld lists NODE at UPSTREAM and responding."""
    line = f"scontrol show node -o {shlex.quote(node)} 2>/dev/null"
    check = (f"{line} | grep -q ' Version={upstream} ' && ! {line} | "
             "grep -Eq ' State=[A-Z+_]*(DOWN|NOT_RESPONDING|UNKNOWN)'")
    what = f"slurmd {upstream} on {node} did not register"
    return [RunCommand(command=control_command(manager, "restart", "slurmd"), description="restart slurmd"),
            RunCommand(command=_wait(check, _gone(manager, "slurmd"), timeout, what), timeout=timeout + 60,
                       description=f"wait for slurmd {upstream} to register")]
