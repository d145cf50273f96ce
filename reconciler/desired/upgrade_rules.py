"""Validate-time rules of driver and Slurm upgrades: the NVIDIA driver, fabric manager and NSCQ packages in lockstep,
and Slurm's release window (which release may follow which, and slurmd never newer than slurmctld).

The desired state alone is judged here (crosscheck.py calls `problems`); what needs the installed versions is judged
at plan time by drivers/slurm_upgrade.py with the same release functions.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator
from typing import Literal

from reconciler.common import hostlist, versions
from reconciler.model import DesiredState
from reconciler.model.packages import PackageSpec

Problem = tuple[tuple[str | int, ...], str]
Family = Literal["driver", "fabricmanager", "nscq"]
SlurmRole = Literal["slurmdbd", "slurmctld", "slurmd", "client"]

# NVIDIA's package names (Ubuntu/Debian and the CUDA repositories; RHEL's `nvidia-fabric-manager`), the testbed's
# stand-ins; group 2 is the driver branch a name carries (`-570`).
_NVIDIA: list[tuple[Family, re.Pattern[str]]] = [
    ("driver", re.compile(r"^(nvidia-driver|cuda-drivers)(?:-(\d+))?(?:-open|-server|-server-open)?$")),
    ("driver", re.compile(r"^(nvidia-driver-standin)()$")),
    ("fabricmanager", re.compile(r"^(nvidia-fabricmanager|cuda-drivers-fabricmanager)(?:-(\d+))?$")),
    ("fabricmanager", re.compile(r"^(nvidia-fabric-manager|nvidia-fabricmanager-standin)()$")),
    ("nscq", re.compile(r"^(libnvidia-nscq)(?:-(\d+))?$")),
    ("nscq", re.compile(r"^(libnvidia-nscq-standin)()$")),
]
LOCKSTEP_RULE = "nvidia-lockstep"
BRANCH_RULE = "nvidia-branch"

# Slurm's packages by the daemon they carry (Debian's slurm-wlm, SchedMD's slurm-smd debs, the rpm spec's names).
_SLURM_ROLES: dict[str, SlurmRole] = {
    "slurmdbd": "slurmdbd", "slurm-slurmdbd": "slurmdbd", "slurm-smd-slurmdbd": "slurmdbd",
    "slurmctld": "slurmctld", "slurm-slurmctld": "slurmctld", "slurm-smd-slurmctld": "slurmctld",
    "slurmd": "slurmd", "slurm-slurmd": "slurmd", "slurm-smd-slurmd": "slurmd",
    "slurm-client": "client", "slurm": "client", "slurm-smd": "client", "slurm-smd-client": "client",
}

# Slurm's compatibility window (https://slurm.schedmd.com/upgrades.html#compatibility_window): "Upgrades from the
# previous two major releases are compatible" (slurmdbd, slurmctld and slurmd accept RPCs and read state files of
# those); "The Slurm 24.11 release will introduce compatibility with three previous major releases". The table
# there: 23.02 <- 22.05, 21.08; 23.11 <- 23.02, 22.05; 24.05 <- 23.11, 23.02; 24.11 <- 24.05, 23.11, 23.02;
# 25.05 <- 24.11, 24.05, 23.11; 25.11 <- 25.05, 24.11, 24.05. The older rows follow the two-release rule
# (RELEASE_NOTES of 22.05: "can be upgraded from version 20.11 or 21.08"). 26.05 follows the three-release rule
# (upgrades.html: "Slurm 24.11 introduced compatibility with the previous three major releases"): 25.11, 25.05,
# 24.11; 24.11 -> 26.05 was run for real on the testbed (Debian's 26.05.5-1, tests/rollout/
# test_slurm_major_upgrade_testbed.py).
COMPATIBLE_FROM: dict[str, tuple[str, ...]] = {
    "20.11": ("20.02", "19.05"),
    "21.08": ("20.11", "20.02"),
    "22.05": ("21.08", "20.11"),
    "23.02": ("22.05", "21.08"),
    "23.11": ("23.02", "22.05"),
    "24.05": ("23.11", "23.02"),
    "24.11": ("24.05", "23.11", "23.02"),
    "25.05": ("24.11", "24.05", "23.11"),
    "25.11": ("25.05", "24.11", "24.05"),
    "26.05": ("25.11", "25.05", "24.11"),
}
UPGRADES_URL = "https://slurm.schedmd.com/upgrades.html#compatibility_window"
SKIP_RULE = "slurm-release-window"
NEWER_RULE = "slurmd-not-newer-than-slurmctld"
DBD_RULE = "slurmdbd-not-older-than-slurmctld"
DOWNGRADE_RULE = "slurm-no-release-downgrade"
BACKUP_RULE = "slurmdbd-backup-first"


def upstream(version: str) -> str:
    """The upstream part of a Debian or rpm version (or glob): no epoch, no revision/release (`3:570.86.15-1.el9`
    -> `570.86.15`)."""
    rest = version.split(":", 1)[1] if ":" in version and version.split(":", 1)[0].isdigit() else version
    return rest.rpartition("-")[0] if "-" in rest else rest


def nvidia_family(name: str) -> tuple[Family, str | None] | None:
    """Which lockstep family a package belongs to, and the driver branch its name carries (None: no branch)."""
    for family, pattern in _NVIDIA:
        if m := pattern.match(name):
            return family, m.group(2) or None
    return None


def branch_agrees(branch: str, version: str) -> bool:
    """True when VERSION's first component can be BRANCH (`570` and `570.86.15-1`, or a glob like `5*`)."""
    first = upstream(version).split(".", 1)[0]
    if versions.is_glob(first):
        return fnmatch.fnmatchcase(branch, first)
    return first.lstrip("0") == branch.lstrip("0")


def slurm_role(name: str) -> SlurmRole | None:
    """The Slurm daemon a package carries (`client`: the commands and libraries), or None for other packages."""
    if name in _SLURM_ROLES:
        return _SLURM_ROLES[name]
    return "client" if name.startswith("slurm-wlm") else None


def release(version: str) -> str | None:
    """The Slurm major release of a version (`24.11.1-1` -> `24.11`); None when it is not literal digits (a glob
    like `24.*`)."""
    parts = upstream(version).split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit() and len(parts[0]) <= 4):
        return None
    return f"{int(parts[0]):02d}.{int(parts[1]):02d}"


def release_key(rel: str) -> tuple[int, int]:
    """A release as a sortable pair."""
    year, month = rel.split(".")
    return int(year), int(month)


def window_problem(old: str, new: str) -> tuple[str, str] | None:
    """(rule, why) when Slurm NEW cannot take over from OLD (a downgrade, a skip past the window, a release the
    table does not know); None when it can."""
    if old == new:
        return None
    if release_key(new) < release_key(old):
        return DOWNGRADE_RULE, (f"Slurm {old} → {new} goes back a release: a daemon cannot read the state files "
                                f"and database a newer release wrote (restore the backup instead)")
    if new not in COMPATIBLE_FROM:
        return SKIP_RULE, (f"Slurm {new} is not in this reconciler's release table (known: "
                           f"{', '.join(COMPATIBLE_FROM)}): its upgrade window cannot be checked")
    if old in COMPATIBLE_FROM[new]:
        return None
    steps = [r for r in COMPATIBLE_FROM if old in COMPATIBLE_FROM[r] and new != r]
    via = f"; upgrade to {steps[-1]} first" if steps else ""
    return SKIP_RULE, (f"Slurm {old} → {new} skips more releases than Slurm supports: {new} takes over from "
                       f"{', '.join(COMPATIBLE_FROM[new])} only ({UPGRADES_URL}){via}")


def _selected(nodes: str | None, wanted: list[str], roles: dict[str, set[str]]) -> list[str]:
    named = hostlist.expand_set(nodes) if nodes else set()
    return [n for n in roles if n in named or roles[n] & set(wanted)]


Pinned = dict[str, tuple[int, PackageSpec]]  # package name -> (packages[] index, spec) on one node


def _by_selection(state: DesiredState, roles: dict[str, set[str]], keep: list[int]) -> dict[tuple[int, ...], str]:
    """Entries KEEP grouped by the set of them that select each node: signature -> one node having it."""
    chosen: dict[str, list[int]] = {}
    for index in keep:
        entry = state.packages[index]
        for node in _selected(entry.nodes, list(entry.roles), roles):
            chosen.setdefault(node, []).append(index)
    groups: dict[tuple[int, ...], str] = {}
    for node, indexes in chosen.items():
        groups.setdefault(tuple(indexes), node)
    return groups


def _pinned(state: DesiredState, indexes: tuple[int, ...], pick: Callable[[str], bool]) -> Pinned:
    """The pinned packages PICK takes from the entries INDEXES (the first entry naming a package wins)."""
    out: Pinned = {}
    for index in indexes:
        for name, spec in state.packages[index].packages.items():
            if spec.pinned and name not in out and pick(name):
                out[name] = (index, spec)
    return out


def _where(index: int, name: str) -> str:
    return f"packages[{index}].packages.{name}"


def lockstep_problems(state: DesiredState, roles: dict[str, set[str]]) -> Iterator[Problem]:
    """Per node: every pinned driver, fabric manager and NSCQ package names one upstream version (a glob: the same
    glob), and a branch in a package's name agrees with its version."""
    keep = [i for i, e in enumerate(state.packages) if any(nvidia_family(n) for n in e.packages)]
    if not keep:
        return
    said: set[tuple[int, str]] = set()
    for indexes, node in _by_selection(state, roles, keep).items():
        pinned = _pinned(state, indexes, pick=lambda n: nvidia_family(n) is not None)
        order = {"driver": 0, "fabricmanager": 1, "nscq": 2}
        names = sorted(pinned, key=lambda n: (order[nvidia_family(n)[0]], pinned[n][0]))  # type: ignore[index]
        for name in names:
            index, spec = pinned[name]
            branch = nvidia_family(name)[1]  # type: ignore[index]
            if branch and not branch_agrees(branch, spec.version) and (index, name) not in said:
                said.add((index, name))
                yield (("packages", index, "packages", name),
                       f"{name} is the {branch} branch but its version is {spec.version} (rule {BRANCH_RULE})")
        if not names:
            continue
        first = names[0]
        ref_index, ref = pinned[first]
        for name in names[1:]:
            index, spec = pinned[name]
            if upstream(spec.version) == upstream(ref.version) or (index, name) in said:
                continue
            said.add((index, name))
            yield (("packages", index, "packages", name),
                   f"{name} {spec.version} does not match {first} {ref.version} ({_where(ref_index, first)}) on "
                   f"{node}: the driver, fabric manager and NSCQ move in lockstep, at one upstream version "
                   f"({upstream(spec.version)} ≠ {upstream(ref.version)}; rule {LOCKSTEP_RULE})")


def slurm_problems(state: DesiredState, roles: dict[str, set[str]]) -> Iterator[Problem]:
    """What the pinned Slurm versions alone break: slurmd or the commands newer than slurmctld's target, and
    slurmdbd older than it (the installed versions are judged at plan time)."""
    keep = [i for i, e in enumerate(state.packages) if any(slurm_role(n) for n in e.packages)]
    if not keep:
        return
    controllers = set(state.cluster.controller_names)
    groups = _by_selection(state, roles, keep)
    ctld: list[tuple[str, str, int]] = []  # (release, package, index) pinned for a controller's slurmctld
    for indexes, node in groups.items():
        for name, (index, spec) in _pinned(state, indexes, pick=lambda n: slurm_role(n) == "slurmctld").items():
            rel = release(spec.version)
            if rel and node in controllers:
                ctld.append((rel, name, index))
    if not ctld:
        return
    oldest = min(ctld, key=lambda c: release_key(c[0]))
    newest = max(ctld, key=lambda c: release_key(c[0]))
    said: set[tuple[int, str]] = set()
    for indexes, node in groups.items():
        # the commands on a slurmdbd or controller node move with its daemon, in its one transaction
        daemon = node in controllers or any(slurm_role(n) in ("slurmdbd", "slurmctld")
                                            for i in indexes for n in state.packages[i].packages)
        for name, (index, spec) in _pinned(state, indexes, pick=lambda n: slurm_role(n) is not None).items():
            rel, role = release(spec.version), slurm_role(name)
            if rel is None or (index, name) in said:
                continue
            if (role == "slurmd" or (role == "client" and not daemon)) and release_key(rel) > release_key(oldest[0]):
                said.add((index, name))
                yield (("packages", index, "packages", name),
                       f"{name} {rel} on {node} would be newer than slurmctld {oldest[0]} "
                       f"({_where(oldest[2], oldest[1])}): Slurm runs older slurmd and commands with a newer "
                       f"slurmctld, never newer ones (rule {NEWER_RULE})")
            elif role == "slurmdbd" and release_key(rel) < release_key(newest[0]):
                said.add((index, name))
                yield (("packages", index, "packages", name),
                       f"slurmdbd {rel} on {node} would be older than slurmctld {newest[0]} "
                       f"({_where(newest[2], newest[1])}): slurmdbd goes first and is never older (rule {DBD_RULE})")


def problems(state: DesiredState, roles: dict[str, set[str]]) -> list[Problem]:
    """Every upgrade rule the desired state breaks on its own (ROLES: inventory node -> its roles)."""
    return [*lockstep_problems(state, roles), *slurm_problems(state, roles)]
