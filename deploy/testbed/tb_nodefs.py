"""Files in a node's upper layer (the overlay over the nodes' lower layer): writing, hiding, users and ids.

The lower layer is the host's ``/`` or the built root of another Slurm release (slurm_root.py); a node's files get
the modes and owners of that layer, and its users are that layer's (plus the test users).
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from pathlib import Path

from tb_base import TestbedError, log

# The nodes' lower layer: the host's / or the built root of another Slurm release (slurm_root.py). Set once per
# process by use_lower() before any node file is written; every read of "the node's own files" goes through it.
_LOWER = [Path("/")]


def use_lower(path: Path) -> None:
    """Make PATH the lower layer that node files are mirrored from (modes, owners, users)."""
    _LOWER[0] = path
    _passwd.cache_clear()
    node_test_users.cache_clear()


def lower_root() -> Path:
    """The root of the nodes' lower layer."""
    return _LOWER[0]


def lower(rel: str) -> Path:
    """A path of the nodes' lower layer (REL relative to its root)."""
    return _LOWER[0] / rel.lstrip("/")


# --------------------------------------------------------------------------------------------- node files


def mirror_mkdir(upper: Path, rel: str) -> Path:
    """Create UPPER/REL, giving each new directory the mode and owner of the host's directory."""
    cur, host = upper, _LOWER[0]
    for part in Path(rel).parts:
        cur, host = cur / part, host / part
        if cur.is_dir():
            continue
        cur.mkdir()
        st = os.stat(host) if host.is_dir() else None
        os.chmod(cur, stat.S_IMODE(st.st_mode) if st else 0o755)
        if st:
            os.chown(cur, st.st_uid, st.st_gid)
    return cur


def put(upper: Path, rel: str, data: str | bytes, mode: int = 0o644, owner: tuple[int, int] = (0, 0)) -> None:
    """Write a file into a node's upper layer."""
    parent = mirror_mkdir(upper, str(Path(rel).parent))
    path = parent / Path(rel).name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)
    os.chown(path, *owner)


def whiteout(upper: Path, rel: str) -> None:
    """Hide a host path from the node (overlay whiteout)."""
    parent = mirror_mkdir(upper, str(Path(rel).parent))
    os.mknod(parent / Path(rel).name, stat.S_IFCHR, os.makedev(0, 0))


def opaque_dir(upper: Path, rel: str, mode: int, owner: tuple[int, int] = (0, 0)) -> None:
    """Make a directory whose host content is hidden from the node."""
    path = mirror_mkdir(upper, rel)
    os.setxattr(path, "trusted.overlay.opaque", b"y")
    os.chmod(path, mode)
    os.chown(path, *owner)


@functools.lru_cache(maxsize=4)
def _passwd(rel: str) -> tuple[tuple[str, int, int], ...]:
    """(name, id, gid) of each line of the lower layer's etc/passwd or etc/group (gid: 0 for groups)."""
    entries = []
    with contextlib.suppress(OSError):
        for line in lower(rel).read_text(errors="replace").splitlines():
            f = line.split(":")
            if len(f) >= 3 and f[2].isdigit():
                entries.append((f[0], int(f[2]), int(f[3]) if rel == "etc/passwd" and f[3].isdigit() else 0))
    return tuple(entries)


def ids(user: str) -> tuple[int, int]:
    """uid and gid of a user of the nodes' lower layer (the host's users, or the built root's)."""
    for name, uid, gid in _passwd("etc/passwd"):
        if name == user:
            return uid, gid
    raise TestbedError(f"no user {user} in {lower('etc/passwd')}")

# Unix users on every node of the full profile (same uid/gid everywhere, home in /home), so that tests can submit
# jobs as someone other than root (`su alice -c 'sbatch ...'` on ctl) and the jobs run as them on compute nodes.
TEST_USERS = {"alice": 2001, "bob": 2002}  # name -> uid, also the gid of the user's own group


@functools.lru_cache(maxsize=1)
def node_test_users() -> dict[str, int]:
    """TEST_USERS less any whose name or ids the host already uses otherwise (left out with a warning, once: the
    host's files are every node's lower layer, and a clash must not stop testbeds that do not need them)."""
    users = {}
    for name, uid in TEST_USERS.items():
        clash = [f"{what} {uid} is {e[0]}'s" for known, what in ((_passwd("etc/passwd"), "uid"),
                                                                 (_passwd("etc/group"), "gid"))
                 for e in known if (e[1] == uid) != (e[0] == name)]
        if clash:
            log(f"warning: test user {name} left out: on this host {', '.join(clash)}")
        else:
            users[name] = uid
    return users


def install_test_users(upper: Path) -> None:
    """node_test_users() on a node: the host's passwd/group/shadow plus their lines, and their home directories."""
    users = node_test_users()
    files = {"etc/passwd": (0o644, 0), "etc/group": (0o644, 0), "etc/shadow": (0o640, _shadow_gid())}
    for rel, (mode, gid) in files.items():
        lines = lower(rel).read_text().splitlines(keepends=True) if lower(rel).exists() else []
        names = {line.split(":", 1)[0] for line in lines}
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        for name, uid in users.items():
            if name in names:
                continue
            lines.append({"etc/passwd": f"{name}:x:{uid}:{uid}:testbed user {name}:/home/{name}:/bin/bash\n",
                          "etc/group": f"{name}:x:{uid}:\n",
                          "etc/shadow": f"{name}:*:20000:0:99999:7:::\n"}[rel])
        put(upper, rel, "".join(lines), mode, (0, gid))
    for name, uid in users.items():
        home = mirror_mkdir(upper, f"home/{name}")
        os.chmod(home, 0o755)
        os.chown(home, uid, uid)


def _shadow_gid() -> int:
    """gid of group shadow (owner group of /etc/shadow), 0 where there is none."""
    try:
        return os.stat(lower("etc/shadow")).st_gid
    except OSError:
        return 0
