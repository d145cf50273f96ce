"""INTERIM stand-in of the Slurm parameter tables (replaced by the generated tables of issue 12)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

_KNOWN = {
    "slurm.conf": {"global": ["SlurmctldPort", "SlurmdPort", "AuthType", "CredType", "SlurmUser", "StateSaveLocation",
                              "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile",
                              "SlurmdLogFile", "SwitchType", "MpiDefault", "ProctrackType", "TaskPlugin",
                              "SelectType", "SelectTypeParameters", "SchedulerType", "GresTypes", "ReturnToService",
                              "SlurmdTimeout", "SlurmctldTimeout", "InactiveLimit", "MinJobAge", "KillWait",
                              "Waittime", "JobAcctGatherType", "AccountingStorageType", "PrologFlags",
                              "SlurmdParameters", "LaunchParameters", "MessageTimeout", "JobCompType",
                              "DefMemPerGPU", "Prolog", "Epilog", "HealthCheckProgram", "HealthCheckInterval",
                              "HealthCheckNodeState", "ClusterName", "SlurmctldHost", "ControlMachine",
                              "SlurmctldParameters", "TopologyPlugin"],
                   "node": ["CPUs", "Boards", "Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory",
                            "Features", "Feature", "Gres", "Weight", "State", "NodeAddr", "NodeHostname"],
                   "partition": ["Nodes", "Default", "MaxTime", "State", "OverSubscribe", "PriorityTier"]},
    "cgroup.conf": {"global": ["CgroupPlugin", "ConstrainCores", "ConstrainDevices", "ConstrainRAMSpace",
                               "ConstrainSwapSpace", "AllowedRAMSpace"]},
    "gres.conf": {"line": ["NodeName", "Name", "Type", "File", "Count", "Cores", "Links", "Flags", "AutoDetect"],
                  "global": ["AutoDetect"]},
}


@dataclass(frozen=True)
class Param:
    """One parameter of a Slurm configuration file."""

    name: str
    file: str
    scope: str
    type: str
    families: tuple[str, ...]
    deprecated: bool


class UnknownParameter(ValueError):
    """A key no Slurm version knows."""


class ParameterNotInVersion(ValueError):
    """A key the cluster's Slurm version does not have."""


def lookup(file: str, key: str, scope: str = "global") -> Param | None:
    """The parameter of that name (case-insensitive), or None."""
    for name in _KNOWN.get(file, {}).get(scope, []):
        if name.lower() == key.lower():
            return Param(name, file, scope, "string", (), False)
    return None


def suggestions(file: str, key: str, scope: str = "global") -> list[str]:
    """Close spellings of an unknown key."""
    return difflib.get_close_matches(key, _KNOWN.get(file, {}).get(scope, []), n=3)


def resolve(file: str, key: str, family: str | None, scope: str = "global") -> Param:
    """The parameter, or an error saying why not."""
    found = lookup(file, key, scope)
    if found is None:
        close = suggestions(file, key, scope)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise UnknownParameter(f"unknown {file} parameter {key!r}{hint}")
    return found


def change_kind(file: str, key: str, family: str, scope: str = "global") -> str:
    """What a change of the key needs."""
    return "reconfigure"


def coerce(param: Param, value: object) -> object:
    """Check a value against the parameter's type."""
    return value


def families(file: str = "slurm.conf") -> tuple[str, ...]:
    """The Slurm release families the tables cover."""
    return ("20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11")
