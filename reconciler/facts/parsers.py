"""Parsers: command output -> typed fact. Each is small and tested with recorded outputs."""

from __future__ import annotations

import re
import shlex

from reconciler.common import hostlist
from reconciler.facts.models import JobFact, MountFact, ServiceFact, SlurmNodeFact

SQUEUE_FORMAT = "%A|%T|%N|%u|%j"
SQUEUE_COMMAND = f"squeue -h -t RUNNING,COMPLETING,CONFIGURING,SUSPENDED -o '{SQUEUE_FORMAT}'"
SCONTROL_NODES_COMMAND = "scontrol show node -o"


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape_octal(text: str) -> str:
    if "\\" not in text:  # the usual case: nothing escaped (a few ms per node of a plan's client time)
        return text
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_proc_mounts(text: str) -> list[MountFact]:
    """Parse /proc/mounts (octal escapes such as \\040 for spaces decoded)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        mounts.append(MountFact(source=_unescape_octal(fields[0]), mountpoint=_unescape_octal(fields[1]),
                                fstype=fields[2], options=fields[3].split(",")))
    return mounts


def parse_mountinfo(text: str) -> list[MountFact]:
    """Parse /proc/self/mountinfo; a mount of a subdirectory gets source `server:/export` + its root."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        root, mountpoint = _unescape_octal(fields[3]), _unescape_octal(fields[4])
        fstype, source = tail[0], _unescape_octal(tail[1])
        if root != "/" and ":" in source:
            source = source.rstrip("/") + root  # server:/export with root /sub -> server:/export/sub
        # strings split out above: nothing to validate (model_construct skips pydantic's per-field checks)
        mounts.append(MountFact.model_construct(source=source, mountpoint=mountpoint, fstype=fstype,
                                                options=fields[5].split(",")))
    return mounts


def _scontrol_fields(line: str) -> dict[str, str]:
    """Split one `scontrol show node -o` line; Reason= runs to the end of the line's key."""
    fields: dict[str, str] = {}
    # Values may contain spaces (Reason=...), so split on ' Key=' boundaries.
    for match in re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/]*)=(.*?)(?=\s[A-Za-z][A-Za-z0-9_/]*=|$)", line):
        fields[match.group(1)] = match.group(2).strip()
    return fields


# The states a Reason is about (scontrol.1, 22.05 and 24.11: "Identify the reason the node is in a DOWN, DRAINED,
# DRAINING, FAILING or FAIL state").
REASON_STATES = frozenset({"DOWN", "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING"})


def parse_scontrol_nodes(text: str) -> dict[str, SlurmNodeFact]:
    """Parse `scontrol show node -o` into each node's state and reason.

    A Reason is kept only while the state is one it explains: Slurm 24.11 (seen on the testbed, 24.11.5 without
    accounting storage) leaves the last drain's Reason on a node resumed since (State=IDLE), where 22.05 clears it;
    shown, it would read as a drain nobody set (tests/facts/test_stale_reason_testbed.py)."""
    nodes: dict[str, SlurmNodeFact] = {}
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = _scontrol_fields(line)
        state = fields.get("State", "UNKNOWN")
        reason = fields.get("Reason")
        if reason:
            reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", reason)  # drop the "[user@time]" suffix
        if not set(state.replace("*", "").split("+")) & REASON_STATES:
            reason = None
        version = fields.get("Version")
        nodes[fields["NodeName"]] = SlurmNodeFact(name=fields["NodeName"], state=state, reason=reason or None,
                                                  version=version if version and version != "(null)" else None,
                                                  next_state=fields.get("NextState") or None)
    return nodes


def parse_squeue(text: str) -> list[JobFact]:
    """Parse squeue output printed with SQUEUE_FORMAT."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|", 4)
        if len(parts) < 3 or not parts[0]:
            continue
        nodes = hostlist.expand(parts[2]) if parts[2] and parts[2] != "(null)" else []
        jobs.append(JobFact(job_id=parts[0], state=parts[1], nodes=nodes,
                            user=parts[3] if len(parts) > 3 else "", name=parts[4] if len(parts) > 4 else ""))
    return jobs


def family_of(version: str | None) -> str | None:
    """`22.05.8` -> `22.05`; None stays None."""
    if not version:
        return None
    return ".".join(version.split(".")[:2])


def parse_slurm_version(text: str) -> str | None:
    """Parse `slurmd -V` / `sinfo -V` output such as `slurm-wlm 22.05.8` or `slurm 23.11.4`."""
    match = re.search(r"slurm(?:-wlm)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


def parse_supervisorctl_status(text: str) -> dict[str, ServiceFact]:
    """Parse `supervisorctl status` lines like `slurmd  RUNNING  pid 42, uptime 0:01:02`."""
    services = {}
    for line in text.splitlines():
        fields = line.split(None, 2)
        if len(fields) < 2:
            continue
        name = fields[0].split(":")[-1]
        # STARTING: spawned, inside its startsecs window; starting it again would be wrong
        services[name] = ServiceFact(name=name, running=fields[1] in ("RUNNING", "STARTING"),
                                     detail=" ".join(fields[1:]))
    return services


def parse_systemctl_is_active(names: list[str], text: str) -> dict[str, ServiceFact]:
    """Parse `systemctl is-active a b c`: one state word per line, in the order asked (a unit starting or
    reloading counts as running: starting it again would be wrong)."""
    states = text.split()
    return {name: ServiceFact(name=name, running=state in ("active", "activating", "reloading"), detail=state)
            for name, state in zip(names, states, strict=False)}


def parse_custom_status(text: str) -> dict[str, ServiceFact]:
    """Parse lines `name rc` printed by the custom status loop (rc 0 = running)."""
    services = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("-").isdigit():
            services[fields[0]] = ServiceFact(name=fields[0], running=fields[1] == "0", detail=f"exit {fields[1]}")
    return services


def custom_status_command(template: str, names: list[str]) -> str:
    """A shell loop that prints `name rc` for each service's custom status command."""
    parts = [f"( {template.replace('{service}', shlex.quote(n))} ) >/dev/null 2>&1; echo {n} $?" for n in names]
    return "; ".join(parts)
