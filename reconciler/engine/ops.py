"""Operations: the serialisable steps a change applies on a node."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, Field, FieldSerializationInfo, field_serializer

REVEAL = "reveal_secrets"  # serialisation context key: only the remote writer's request carries a secret


def fingerprint(content: str) -> str:
    """What plans, logs and JSON show of a secret file's content: its sha256."""
    return "sha256:" + hashlib.sha256(content.encode()).hexdigest()


class WriteFile(BaseModel):
    """Write a whole file atomically (temp + fsync + rename), keeping a backup of the old one."""

    kind: Literal["write"] = "write"
    path: str
    content: str = Field(repr=False)  # never in a repr (a secret's would reach a log)
    mode: str | None = None
    owner: str | None = None
    group: str | None = None
    validate_cmd: str | None = None  # run with %s replaced by the temp file; non-zero exit refuses the write
    expect_sha256: str | None = None  # refuse when the file changed since the facts were read
    after: str | None = None  # command run after install; on failure the backup is restored (e.g. exportfs -ra)
    encoding: Literal["utf-8", "base64"] = "utf-8"  # base64: content is binary (a munge key)
    secret: bool = False  # content is dumped as its fingerprint, except for the remote writer (context REVEAL)
    backup: bool = True  # keep the old file as PATH.reconciler-bak (never for a secret: the old key must go)

    @field_serializer("content", "expect_sha256")
    def _hide_secret(self, value: str | None, info: FieldSerializationInfo) -> str | None:
        """A secret's content (as `<secret sha256:...>`) and hash (as None) are dumped whole only for the
        remote writer (context REVEAL)."""
        if not self.secret or (info.context or {}).get(REVEAL):
            return value
        return None if value is None or info.field_name == "expect_sha256" else f"<secret {fingerprint(value)}>"

    def __repr_args__(self) -> Any:
        """repr() never shows a secret's content (nor its hash)."""
        hidden = ("content", "expect_sha256") if self.secret else ()
        return [(k, "<secret>" if k in hidden else v) for k, v in super().__repr_args__()]


class RunCommand(BaseModel):
    """Run a shell command on the node."""

    kind: Literal["run"] = "run"
    command: str
    description: str = ""
    timeout: float | None = Field(default=None, description="Seconds it may run (None: ssh.command_timeout); "
                                  "for a step that waits on purpose, e.g. slurmdbd converting its database")


Op = WriteFile | RunCommand
