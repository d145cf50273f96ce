"""A pull request's head through Git: fetched into a local ref, its YAML tree exported with bounded sizes."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import git

from reconciler.desired.loader import ConfigError, DesiredStateError, Location
from reconciler.forge.base import Forge, redact
from reconciler.model import AGE_SUFFIX

LOCAL_REF = "refs/reconciler/pr/{number}"
MAX_FILE_BYTES = 4 << 20
MAX_TREE_BYTES = 64 << 20
MAX_TREE_FILES = 20_000
YAML_SUFFIXES = (".yaml", ".yml")
EXPORTED_SUFFIXES = (*YAML_SUFFIXES, AGE_SUFFIX)  # .age: ciphertext, compared by sha256, never decrypted here


class PrFetchError(Exception):
    """The PR head could not be fetched (message redacted: no credentials from remote URLs)."""


def fetch_pr_head(repo: git.Repo, forge: Forge, number: int, remote: str = "origin") -> str:
    """Fetch the PR's head ref into refs/reconciler/pr/N; return its commit sha."""
    local = LOCAL_REF.format(number=number)
    try:
        repo.git.fetch("--no-tags", "--no-recurse-submodules", "--quiet", remote,
                       f"+{forge.pr_ref(number)}:{local}")
        return str(repo.commit(local).hexsha)
    except (git.GitCommandError, ValueError, git.BadName) as exc:
        stderr = getattr(exc, "stderr", "") or str(exc)
        last = [line for line in str(stderr).strip().splitlines() if line.strip()][-1:] or ["failed"]
        raise PrFetchError(redact(f"git fetch {forge.pr_ref(number)}: {last[0].strip()[:300]}")) from None


def export_tree(repo: git.Repo, sha: str, subdir: str, dest: Path) -> Path:
    """Write the files under SUBDIR of commit SHA into DEST (YAML, the `source:` files they name, `.age` files
    as ciphertext); return DEST.

    Only regular files (Git modes 100644/100755) are written; symlinks and submodules are skipped so a PR
    cannot make the loader read a file outside its tree, and nothing is ever executed. Each file is at most
    MAX_FILE_BYTES, the whole tree MAX_TREE_BYTES and MAX_TREE_FILES files: a PR cannot fill the disk.
    """
    dest.mkdir(parents=True, exist_ok=True)
    tree = repo.commit(sha).tree
    prefix = PurePosixPath(subdir.strip("/")) if subdir.strip("/.") else PurePosixPath()
    if str(prefix) != ".":
        try:
            tree = tree / str(prefix)
        except KeyError:
            return dest  # no such directory at this commit: load_dir reports "no YAML files found"
        if tree.type != "tree":
            return dest
    files = total = 0
    for item in tree.traverse():
        if not isinstance(item, git.Blob) or item.mode not in (0o100644, 0o100755):
            continue
        rel = PurePosixPath(item.path).relative_to(prefix) if str(prefix) != "." else PurePosixPath(item.path)
        if any(part in ("", ".", "..") for part in rel.parts) or (rel.parts and rel.parts[0] == ".git"):
            continue
        if rel.suffix in EXPORTED_SUFFIXES and item.size > MAX_FILE_BYTES:
            raise DesiredStateError([ConfigError(Location(str(rel), 1, 1), (),
                                                 f"file of {item.size} bytes is over {MAX_FILE_BYTES} bytes")])
        if item.size > MAX_FILE_BYTES:
            continue  # not YAML: a `source:` naming it is refused by the loader as missing
        files, total = files + 1, total + item.size
        if files > MAX_TREE_FILES or total > MAX_TREE_BYTES:
            raise DesiredStateError([ConfigError(Location(str(rel), 1, 1), (),
                                                 f"the tree is over {MAX_TREE_FILES} files or {MAX_TREE_BYTES} "
                                                 "bytes: not planned")])
        target = dest.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.data_stream.read())
    return dest


def display_errors(exc: DesiredStateError, root: Path, subdir: str) -> list[str]:
    """Validation errors with paths as they are in the repository (SUBDIR/file:line:column)."""
    prefix = subdir.strip("/")
    out = []
    for error in exc.errors:
        text = str(error)
        if error.location is not None and prefix and prefix != ".":
            text = f"{prefix}/{text}"
        out.append(text.replace(str(root), prefix or "."))
    return out
