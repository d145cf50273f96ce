"""Fact: which Slurm daemons run on a node, whether each still runs a binary its package has since replaced, and the
versions slurmctld and slurmdbd answer with: what an interrupted upgrade leaves behind (the packages moved, a daemon
not yet restarted), which the installed versions alone do not show.

A replaced binary: `/proc/PID/exe` of a process whose file dpkg or rpm replaced reads `PATH (deleted)` (observed on
the testbed after `apt-get install --reinstall slurmd`). The running releases: `scontrol show config` prints the
controller's own `SLURM_VERSION`; `sacctmgr show configuration` prints `SLURMDBD_VERSION`, the answering slurmdbd's
(both observed on 24.11.5 and 26.05.5); slurmd's is the `Version=` it registered with (`scontrol show node`, in
the Slurm node facts).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

FACTS_KEY = "slurm-running"
DAEMONS = ("slurmdbd", "slurmctld", "slurmd")
ASK_TIMEOUT = 10  # seconds each RPC may take: a stopped slurmdbd must not hold the facts up
DRIVER = "slurm-upgrade"  # the driver whose change restarts a daemon an interrupted upgrade left behind


def owed_resource(daemons: Iterable[str]) -> str:
    """The resource of the change restarting DAEMONS (`restart slurmdbd and slurmctld`)."""
    return "restart " + " and ".join(daemons)


def restarts(resource: str, driver: str, daemon: str) -> bool:
    """True when a change (its RESOURCE and DRIVER) is the owed restart of DAEMON."""
    return driver == DRIVER and resource.startswith("restart ") and daemon in resource.split()


@dataclass(frozen=True)
class RunningSlurm:
    """One node's Slurm daemons: those running, those running a replaced binary, and the versions answered."""

    running: frozenset[str] = frozenset()
    replaced: frozenset[str] = frozenset()
    versions: dict[str, str] = field(default_factory=dict)  # slurmctld / slurmdbd -> version it answers with

    def to_json(self) -> dict:
        """Plain values, sorted (ClusterFacts.kept's JSON form)."""
        return {"running": sorted(self.running), "replaced": sorted(self.replaced), "versions": self.versions}


def command(named: Iterable[str]) -> str:
    """Shell printing `running D`, `replaced D` for each of DAEMONS that runs, then `version D V` for slurmctld and
    slurmdbd where named (asked of the daemon itself)."""
    daemons = set(named)
    parts = []
    for daemon in sorted(d for d in daemons if d in DAEMONS):
        parts.append(f"p=$(pgrep -xo {daemon}) && case \"$(readlink /proc/$p/exe)\" in "
                     f"*' (deleted)') echo 'replaced {daemon}';; *) echo 'running {daemon}';; esac")
    if "slurmctld" in daemons:
        parts.append(f"v=$(timeout {ASK_TIMEOUT} scontrol show config 2>/dev/null | "
                     "sed -n 's/^SLURM_VERSION *= *//p') && [ -n \"$v\" ] && echo \"version slurmctld $v\"")
    if "slurmdbd" in daemons:
        parts.append(f"v=$(timeout {ASK_TIMEOUT} sacctmgr -n show configuration 2>/dev/null | "
                     "sed -n 's/^SLURMDBD_VERSION *= *//p') && [ -n \"$v\" ] && echo \"version slurmdbd $v\"")
    return "; ".join(f"{{ {p}; }}" for p in parts) + "; true"


def parse(text: str) -> RunningSlurm:
    """The output of `command`."""
    running: set[str] = set()
    replaced: set[str] = set()
    versions: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ("running", "replaced") and words[1] in DAEMONS:
            running.add(words[1])
            if words[0] == "replaced":
                replaced.add(words[1])
        elif len(words) == 3 and words[0] == "version" and words[1] in ("slurmctld", "slurmdbd"):
            versions[words[1]] = words[2]
    return RunningSlurm(frozenset(running), frozenset(replaced), versions)
