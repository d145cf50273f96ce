"""What every driver shares: the driver protocol and the managed-file comparison."""

from __future__ import annotations

import difflib
from typing import Protocol

from reconciler.engine.context import Context
from reconciler.engine.ops import WriteFile
from reconciler.engine.plan import Change
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import FileFact, NodeFacts

HEADER_MARK = ": managed by reconciler from "


class Driver(Protocol):
    """A managed thing: says which facts it needs, and turns facts into changes."""

    name: str
    phase: int

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Add to the node's fact request what this driver needs."""

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Compare facts with the desired state and return the node's changes."""


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


def file_change(driver: str, node: str, path: str, fact: FileFact | None, desired: str, *, phase: int,
                mode: str = "0644", owner: str = "root", group: str = "root",
                validate_cmd: str | None = None, after: str | None = None,
                ignore_header: bool = False) -> Change:
    """Compare a whole managed file with its desired content and mode; build the write if it differs."""
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
                  summary=summary, diff=None if same else unified_diff(path, node, current, desired))
