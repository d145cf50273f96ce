"""Operations: the serialisable steps a change applies on a node."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


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


class RunCommand(BaseModel):
    """Run a shell command on the node."""

    kind: Literal["run"] = "run"
    command: str
    description: str = ""


Op = WriteFile | RunCommand
