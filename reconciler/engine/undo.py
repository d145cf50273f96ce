"""A change's before-image as data: how to put its resource back as the facts showed it before the apply."""

from __future__ import annotations

from pydantic import BaseModel, Field

from reconciler.engine.ops import Op


class Restore(BaseModel):
    """What restoring one resource does (`ops`), or why it cannot be restored (`missing`, and no ops)."""

    summary: str = Field(description="What the restore does, for the report: `/etc/x back to its 17 bytes, "
                         "mode 0755 root:root`")
    ops: list[Op] = Field(default_factory=list)
    check: str | None = Field(default=None, description="Shell (on run_on/node): exits 0 when the resource is "
                              "already as before (the change never landed): nothing to restore")
    missing: str | None = Field(default=None, description="Why there is no restorable before-image")

    @classmethod
    def none(cls, why: str) -> Restore:
        """A change whose before-image cannot be restored, and why."""
        return cls(summary="", missing=why)
