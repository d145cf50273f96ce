"""Operations: the serialisable steps a change applies on a node."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, FieldSerializationInfo, field_serializer

REVEAL = "reveal_secrets"  # serialisation context key: only the remote writer's request carries a secret


class WriteFile(BaseModel):
    """Write a whole file atomically (temp + fsync + rename), keeping a backup of the old one."""

    kind: Literal["write"] = "write"
    path: str
    content: str
    mode: str | None = None
    owner: str | None = None
    group: str | None = None
    validate_cmd: str | None = None  # run with %s replaced by the temp file; non-zero exit refuses the write
    expect_sha256: str | None = None  # refuse when the file changed since the facts were read
    after: str | None = None  # command run after install; on failure the backup is restored (e.g. exportfs -ra)
    encoding: Literal["utf-8", "base64"] = "utf-8"  # base64: content is binary (a munge key)
    secret: bool = False  # content is left out of every dump, repr and plan; only the node gets it
    backup: bool = True  # keep the old file as PATH.reconciler-bak (never for a secret: the old key must go)

    @field_serializer("content", "expect_sha256")
    def _hide_secret(self, value: str | None, info: FieldSerializationInfo) -> str | None:
        """A secret's content and hash are dumped only for the remote writer (context REVEAL); else None."""
        return value if not self.secret or (info.context or {}).get(REVEAL) else None

    def __repr_args__(self) -> Any:
        """repr() never shows a secret's content (nor its hash)."""
        hidden = ("content", "expect_sha256") if self.secret else ()
        return [(k, "<secret>" if k in hidden else v) for k, v in super().__repr_args__()]


class RunCommand(BaseModel):
    """Run a shell command on the node."""

    kind: Literal["run"] = "run"
    command: str
    description: str = ""


Op = WriteFile | RunCommand
