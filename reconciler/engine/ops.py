"""Operations: the serialisable steps a change applies on a node."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, FieldSerializationInfo, field_serializer

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
import hashlib
from typing import Any, Literal

from pydantic import BaseModel, FieldSerializationInfo, field_serializer

REVEAL = "reveal_secrets"  # serialisation context key: only the remote writer's request carries a secret


def fingerprint(content: str) -> str:
    """What plans, logs and JSON show of a secret file's content: its sha256."""
    return "sha256:" + hashlib.sha256(content.encode()).hexdigest()


class RunCommand(BaseModel):
    """Run a shell command on the node."""

    kind: Literal["run"] = "run"
    command: str
    description: str = ""


Op = WriteFile | RunCommand
