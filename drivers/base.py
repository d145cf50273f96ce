"""What every driver shares: the managed-file comparison (the protocol itself is reconciler/engine/driver.py)."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from reconciler.engine.driver import Driver
from reconciler.engine.ops import WriteFile
from reconciler.engine.plan import Change
from reconciler.facts.models import FileFact

HEADER_MARK = ": managed by reconciler from "


def unified_diff(path: str, node: str, before: str, after: str) -> str:
    """A unified diff of a file's content, named after node and path."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"{node}:{path} (current)", tofile=f"{node}:{path} (desired)")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def without_header(text: str) -> str:
    """Drop our header comment, so a new commit alone does not rewrite an unchanged file."""
    lines = text.splitlines(keepends=True)
    if lines and HEADER_MARK in lines[0]:
        lines = lines[1:]
        if lines and lines[0].startswith("# Do not edit by hand"):
            lines = lines[1:]
    return "".join(lines)


def without_leading_comments(text: str) -> str:
    """The text from its first line that is neither a comment nor blank (a header of any author aside)."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")),
                 len(lines))
    return "".join(lines[start:])


def file_change(driver: str, node: str, path: str, fact: FileFact | None, desired: str, *, phase: int,
                mode: str = "0644", owner: str = "root", group: str = "root",
                validate_cmd: str | None = None, after: str | None = None,
                ignore_header: bool = False, equivalent: Callable[[str, str], bool] | None = None) -> Change:
    """Compare a whole managed file with its desired content and mode; build the write if it differs.

    `equivalent` adopts a file that we never wrote (no header of ours) when it means the same as the desired
    one: a cluster taken over with `reconciler import` is not rewritten for its comments and layout.
    """
    def write() -> WriteFile:  # built only when something changes: a converged 10,000-node plan makes none
        return WriteFile(path=path, content=desired, mode=mode, owner=owner, group=group,
                         validate_cmd=validate_cmd, after=after)

    if fact is None or not fact.exists:
        return Change(node=node, driver=driver, resource=path, action="create", phase=phase, ops=[write()],
                      summary=f"create {path}", diff=unified_diff(path, node, "", desired))
    current = fact.content
    if current is None:
        return Change(node=node, driver=driver, resource=path, action="error", phase=phase,
                      summary=f"{path} is too large to compare ({fact.size} bytes)")
    same = (without_header(current) == without_header(desired)) if ignore_header else current == desired
    if not same and equivalent is not None and not is_ours(current):
        same = equivalent(current, desired)
    meta = [f"{k} {getattr(fact, k)} -> {v}" for k, v in (("mode", mode), ("owner", owner), ("group", group))
            if v is not None and getattr(fact, k) != v]
    if same and not meta:
        return Change(node=node, driver=driver, resource=path, action="ok", phase=phase)
    op = write()
    op.expect_sha256 = fact.sha256
    if same:
        op.content = current  # keep the bytes (and header); only mode/owner change
    summary = f"update {path}" + (f" ({', '.join(meta)})" if meta else "")
    return Change(node=node, driver=driver, resource=path, action="update", phase=phase, ops=[op],
                  summary=summary, diff=None if same else _diff(path, node, current, desired, ignore_header))


def is_ours(text: str) -> bool:
    """True when the file starts with the header the reconciler writes."""
    return HEADER_MARK in text.split("\n", 1)[0]


def _diff(path: str, node: str, current: str, desired: str, ignore_header: bool) -> str:
    """The diff a reviewer reads: with ignore_header, the header comments of either side are left out."""
    if ignore_header:
        return unified_diff(path, node, without_leading_comments(current), without_leading_comments(desired))
    return unified_diff(path, node, current, desired)


__all__ = ["Driver", "HEADER_MARK", "file_change", "is_ours", "unified_diff", "without_header",
           "without_leading_comments"]
