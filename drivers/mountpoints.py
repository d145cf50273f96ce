"""Mount points the mounts driver created: remembered on the node, removed (when empty) once no mount wants them.

`mkdir -p` of a missing mount point is recorded first in RECORD (one path a line), so a later plan, the rollback
of a failed mount above all, knows the directory is ours: when no mount wants it any more, it is removed if it is
empty (`rmdir --ignore-fail-on-non-empty`) and forgotten either way. A directory that existed before the mount,
or that holds anything, is never removed.
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from typing import Any

from reconciler.desired.targets import SYSTEM_DIRS
from reconciler.engine.context import Context
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import Change
from reconciler.engine.undo import Restore
from reconciler.facts.models import ClusterFacts, NodeFacts
from reconciler.model.values import clean_abs_path

RECORD = "/var/lib/reconciler/mountpoints-created"
FACTS_KEY = "mountpoints_created"  # the fact snippet's name (its answer is kept as CreatedMountpoints)
STATUSES = ("empty", "full", "absent", "mounted")
MAX_ENTRIES = 10_000
PATH_MAX = 4096  # the longest path Linux takes


_SNIPPET = r"""
import os
try:
    paths = [p for p in open(%(record)r).read().split('\n') if p][:%(max)d]
except OSError:
    paths = []
def unescape(field):  # mountinfo writes space, tab, newline and backslash as \ooo
    if '\\' not in field: return field
    parts = field.split('\\')
    return parts[0] + ''.join(chr(int(p[:3], 8)) + p[3:] if len(p) >= 3 and all(c in '01234567' for c in p[:3])
                              else '\\' + p for p in parts[1:])
points = set()
if paths:
    for line in open('/proc/self/mountinfo'):
        f = line.split(' ')
        if len(f) > 4:
            points.add(unescape(f[4]))
found = {}
for p in paths:
    try:
        if p in points:
            found[p] = 'mounted'
        elif os.path.islink(p) or not os.path.isdir(p):
            found[p] = 'absent'
        else:
            found[p] = 'full' if os.listdir(p) else 'empty'
    except OSError:
        pass
stdout = repr(found)
"""


def fact_snippet(record: str = RECORD) -> str:
    """The fact script's snippet (stdlib, Python 3.8): each recorded path's status. A mounted one is never listed
    (a hung NFS server would hang the gathering); a symbolic link reads as absent (not the directory we made).
    It imports nothing the fact script has not loaded (no json, no re: ~7 ms of every node's gather), and answers
    a Python literal (repr)."""
    return _SNIPPET % {"record": record, "max": MAX_ENTRIES}


def make_command(mountpoint: str, record: str = RECORD) -> str:
    """Shell: create MOUNTPOINT when missing, recording it as ours first (a crash in between leaves no unknown
    directory); an existing directory is left as it is and not recorded."""
    mp, rec = shlex.quote(mountpoint), shlex.quote(record)
    return (f"if [ ! -e {mp} ]; then mkdir -p {shlex.quote(record.rsplit('/', 1)[0])} && "
            f"{{ grep -qxF -- {mp} {rec} 2>/dev/null || printf '%s\\n' {mp} >> {rec}; }} && mkdir -p {mp}; fi")


def remove_command(mountpoint: str, record: str = RECORD) -> str:
    """Shell: remove MOUNTPOINT if it is an empty directory, then forget it (kept when it holds anything)."""
    mp, rec = shlex.quote(mountpoint), shlex.quote(record)
    return (f"{{ [ ! -d {mp} ] || [ -L {mp} ] || rmdir --ignore-fail-on-non-empty -- {mp}; }} && "
            f"{{ grep -vxF -- {mp} {rec} > {rec}.new || true; }} && mv -f {rec}.new {rec}")


@dataclass(frozen=True)
class CreatedMountpoints:
    """One node's mount points the driver created, by status (empty, full, absent, mounted)."""

    paths: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """Plain values (ClusterFacts.kept's JSON form)."""
        return {"paths": dict(sorted(self.paths.items()))}


def parse_answer(answer: Any) -> dict[str, str]:
    """The snippet's answer: clean absolute paths with a known status (anything else a node says is dropped)."""
    if not isinstance(answer, dict) or answer.get("rc") != 0 or not isinstance(answer.get("stdout", ""), str):
        return {}
    text = answer.get("stdout") or "{}"
    if len(text) > MAX_ENTRIES * (PATH_MAX + 32):
        return {}
    try:
        data = ast.literal_eval(text)  # literals only: nothing a node says is run
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    out: dict[str, str] = {}
    for path, status in (data.items() if isinstance(data, dict) else []):
        try:
            clean = isinstance(path, str) and clean_abs_path(path) == path
        except ValueError:
            clean = False
        if clean and status in STATUSES and path not in SYSTEM_DIRS and len(out) < MAX_ENTRIES:
            out[path] = status
    return out


def absorb(cluster: ClusterFacts, node: str, facts: NodeFacts, commands: dict[str, dict]) -> None:
    """Keep NODE's created mount points as CreatedMountpoints (nothing when the node did not answer)."""
    if facts.reachable and FACTS_KEY in commands:
        cluster.keep(node, CreatedMountpoints(parse_answer(commands[FACTS_KEY])))


def created(ctx: Context, node: str) -> dict[str, str]:
    """NODE's mount points the driver created: path -> empty, full, absent or mounted."""
    found = ctx.facts.kept_of(CreatedMountpoints, node)
    return dict(found.paths) if found is not None else {}


def removals(node: str, ours: dict[str, str], keep: set[str], driver: str, phase: int) -> list[Change]:
    """A change for each empty, unmounted mount point of ours that no mount wants (KEEP: wanted or unmounted in
    this plan); full, absent and mounted ones are left alone."""
    return [Change(node=node, driver=driver, resource=f"mount point {path}", action="delete", phase=phase,
                   summary=f"remove the empty directory {path} (created for a mount that is no longer wanted)",
                   ops=[RunCommand(command=remove_command(path), description=f"remove the empty mount point {path}")],
                   restore=Restore(summary=f"{path} created again (empty)", check=f"[ -d {shlex.quote(path)} ]",
                                   ops=[RunCommand(command=make_command(path), description=f"create {path}")]))
            for path, status in sorted(ours.items()) if status == "empty" and path not in keep]
