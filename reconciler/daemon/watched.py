"""Local mode: which files of the watched directory count as the desired state, and their content hash."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from reconciler.desired.managed import MAX_SOURCE_BYTES

# Editors' scratch files: vim (.swp/.swo/.swx, its 4913 write probe, backup~), emacs (#file#, .#file lock),
# and the temp name of an atomic save (file.tmp then rename: the rename's destination still counts).
_TEMP_SUFFIXES = (".swp", ".swo", ".swx", "~", ".tmp")


def ignored(directory: Path, path: str | Path, exclude: tuple[Path, ...] = ()) -> bool:
    """True for a path that is not part of the desired state: outside DIRECTORY, under .git, an editor's scratch
    file, or under one of EXCLUDE (e.g. a state directory kept inside the watched one)."""
    path = Path(path)
    if any(path == ex or ex in path.parents for ex in exclude):
        return True
    try:
        parts = path.relative_to(directory).parts
    except ValueError:
        return True
    if not parts or ".git" in parts:
        return True
    name = parts[-1]
    return name.endswith(_TEMP_SUFFIXES) or name == "4913" or name.startswith(".#") \
        or (name.startswith("#") and name.endswith("#"))


def state_files(directory: Path, exclude: tuple[Path, ...] = ()) -> list[Path]:
    """Every regular file under DIRECTORY that is not ignored(), in a stable order: YAML files and every file
    a YAML file may name (`source:`, .age secrets, `munge.key_age`), read or not."""
    found: list[Path] = []
    for root, dirs, names in os.walk(directory):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not ignored(directory, here / d, exclude))
        found.extend(here / n for n in names if (here / n).is_file() and not ignored(directory, here / n, exclude))
    return sorted(found)


def content_hash(directory: Path, exclude: tuple[Path, ...] = ()) -> str:
    """The 'commit' of a watched directory: `local:` and a hash of the names and contents of its state_files()
    (a file larger than any source the loader accepts counts by size and mtime, not read every cycle)."""
    directory = directory.resolve()
    digest = hashlib.sha256()
    for path in state_files(directory, exclude):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        with contextlib.suppress(OSError):
            stat = path.stat()
            if stat.st_size > MAX_SOURCE_BYTES:
                digest.update(f"size={stat.st_size} mtime={stat.st_mtime_ns}".encode())
            else:
                digest.update(path.read_bytes())
        digest.update(b"\0")
    return "local:" + digest.hexdigest()[:12]
