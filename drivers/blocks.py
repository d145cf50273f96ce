"""Shared planning for files of which only the managed block is ours (/etc/exports, /etc/fstab)."""

from __future__ import annotations

from reconciler.drivers.base import unified_diff
from reconciler.engine.ops import WriteFile
from reconciler.engine.plan import Action, Change
from reconciler.facts.models import FileFact
from reconciler.render.blocks import BlockError, block_body, replace_block


def block_change(driver: str, node: str, path: str, fact: FileFact | None, body: list[str] | None, *,
                 phase: int, after: str | None = None) -> Change:
    """Compare the managed block of a file with the desired lines; lines outside it are kept as they are."""
    current = fact.content if fact and fact.exists and fact.content is not None else ""
    try:
        current_body = block_body(current)
    except BlockError as exc:
        return Change(node=node, driver=driver, resource=path, action="error", phase=phase,
                      summary=f"{path}: {exc}; fix the markers by hand")
    if current_body == body:
        return Change(node=node, driver=driver, resource=path, action="ok", phase=phase)
    desired = replace_block(current, body)
    action: Action = "create" if current_body is None else ("delete" if body is None else "update")
    mode = fact.mode if fact and fact.exists else "0644"
    write = WriteFile(path=path, content=desired, mode=mode, owner=fact.owner if fact and fact.exists else "root",
                      group=fact.group if fact and fact.exists else "root",
                      expect_sha256=fact.sha256 if fact and fact.exists else None, after=after)
    verb = {"create": "add", "update": "update", "delete": "remove"}[action]
    return Change(node=node, driver=driver, resource=path, action=action, phase=phase, ops=[write],
                  summary=f"{verb} the managed block of {path}", diff=unified_diff(path, node, current, desired))
