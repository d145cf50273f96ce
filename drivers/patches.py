"""Driver for script patches: match -> replace edits and whole managed files on node groups."""

from __future__ import annotations

from reconciler.common import hostlist
from reconciler.drivers.base import file_change, unified_diff
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import WriteFile
from reconciler.engine.plan import Change
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import NodeFacts
from reconciler.model import Patch


class PatchError(ValueError):
    """A patch that does not apply to the file as it is."""


def apply_edit(content: str, patch: Patch) -> str:
    """Apply a match -> replace edit; already-applied is a no-op; neither present is an error."""
    assert patch.match is not None and patch.replace is not None
    if patch.match in content:
        return content.replace(patch.match, patch.replace)
    if patch.replace in content:
        return content
    raise PatchError(f"patch {patch.name!r} does not apply to {patch.path}: match text not found")


class PatchesDriver(DriverDefaults):
    """Keeps prolog/epilog and other scripts patched."""

    name = "patches"
    phase = phase_of("patches")

    def _patches(self, ctx: Context, node: str) -> list[Patch]:
        return [p for p in ctx.state.patches if node in hostlist.expand_set(p.nodes)]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Ask for the content of every patched file."""
        req.files += sorted({p.path for p in self._patches(ctx, node)})

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """One change per patched path (several edits on one file are folded in order)."""
        by_path: dict[str, list[Patch]] = {}
        for patch in self._patches(ctx, node):
            by_path.setdefault(patch.path, []).append(patch)
        return [self._plan_path(node, path, patches, facts) for path, patches in by_path.items()]

    def _plan_path(self, node: str, path: str, patches: list[Patch], facts: NodeFacts) -> Change:
        fact = facts.files.get(path)
        names = ", ".join(p.name for p in patches)
        whole = [p for p in patches if p.content is not None]
        if whole:
            last = whole[-1]
            return file_change(self.name, node, path, fact, last.content or "", phase=self.phase,
                               mode=last.mode or "0755", owner=last.owner or "root", group=last.group or "root",
                               validate_cmd=last.validate_cmd)
        if fact is None or not fact.exists or fact.content is None:
            return Change(node=node, driver=self.name, resource=path, action="error", phase=self.phase,
                          summary=f"patch {names}: {path} does not exist on the node")
        content = fact.content
        try:
            for patch in patches:
                content = apply_edit(content, patch)
        except PatchError as exc:
            return Change(node=node, driver=self.name, resource=path, action="error", phase=self.phase,
                          summary=str(exc))
        if content == fact.content:
            return Change(node=node, driver=self.name, resource=path, action="ok", phase=self.phase)
        validate = next((p.validate_cmd for p in patches if p.validate_cmd), None)
        write = WriteFile(path=path, content=content, mode=fact.mode, owner=fact.owner, group=fact.group,
                          expect_sha256=fact.sha256, validate_cmd=validate)
        return Change(node=node, driver=self.name, resource=path, action="update", phase=self.phase,
                      summary=f"patch {names} on {path}", ops=[write],
                      diff=unified_diff(path, node, fact.content, content))
