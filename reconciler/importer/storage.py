"""Read NFS exports and the NFS/Lustre lines of fstab into `storage:` entries."""

from __future__ import annotations

import re

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from reconciler.importer.convert import ImportProblem
from reconciler.render.blocks import BlockError, block_body

NETWORK_TYPES = ("nfs", "nfs4", "lustre")
_CLIENT = re.compile(r"^([^()\s]*)(?:\(([^()]*)\))?$")


def _lines(text: str, file: str) -> list[tuple[int, str]]:
    """The lines to import: the managed block's when there is one, else every line; comments dropped."""
    try:
        body = block_body(text)
    except BlockError as exc:
        raise ImportProblem(file, 0, str(exc)) from None
    if body is not None:
        start = text.splitlines().index(next(line for line in text.splitlines() if line.startswith("# BEGIN")))
        numbered = [(start + 2 + i, line) for i, line in enumerate(body)]
    else:
        numbered = [(i + 1, line) for i, line in enumerate(text.splitlines())]
    return [(n, line.split("#", 1)[0].strip()) for n, line in numbered if line.split("#", 1)[0].strip()]


def import_exports(text: str, server: str, file: str = "/etc/exports") -> CommentedSeq:
    """exports(5) lines as `storage.exports` entries of one server node (one option list per line)."""
    out = CommentedSeq()
    for number, line in _lines(text, file):
        if line.endswith("\\"):
            raise ImportProblem(file, number, "continued export lines cannot be expressed: join them")
        path, *specs = line.split()
        clients, options = [], None
        for spec in specs or ["*"]:
            match = _CLIENT.match(spec)
            if match is None:
                raise ImportProblem(file, number, f"cannot read the client {spec!r}")
            opts = (match.group(2) or "").split(",") if match.group(2) is not None else []
            if options is not None and opts != options:
                raise ImportProblem(file, number, "clients with different options on one line cannot be expressed: "
                                                  "write one line per option set")
            options = opts
            clients.append(match.group(1) or "*")
        entry = CommentedMap(server=server, path=path, clients=clients)
        entry["options"] = options or []
        out.append(entry)
    return out


def import_fstab(text: str, node: str, file: str = "/etc/fstab") -> CommentedSeq:
    """The NFS and Lustre lines of an fstab as `storage.mounts` entries for one node."""
    out = CommentedSeq()
    for _, line in _lines(text, file):
        fields = line.split()
        if len(fields) < 3 or fields[2] not in NETWORK_TYPES:
            continue
        if len(fields) < 4:
            fields.append("defaults")
        entry = CommentedMap(source=fields[0], mountpoint=fields[1].replace("\\040", " "), type=fields[2])
        entry["options"] = fields[3].split(",")
        entry["nodes"] = node
        if len(fields) > 4 and fields[4] != "0":
            entry["dump"] = int(fields[4])
        if len(fields) > 5 and fields[5] != "0":
            entry["passno"] = int(fields[5])
        out.append(entry)
    return out
