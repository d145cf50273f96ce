"""Desired-state schema of secrets: `secrets:` (the recipients of the repository's age-encrypted files) and
`munge:` (where the munge key comes from); decryption is reconciler/desired/agesecrets.py.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, PrivateAttr, field_validator, model_validator

from reconciler.model.base import AbsPath, Strict
from reconciler.model.values import Text

AGE_SUFFIX = ".age"  # a `source:` (or munge `key_age`) ending so is age-encrypted: reconciler/desired/agesecrets.py
_AGE_RECIPIENT = re.compile(r"^age1[02-9ac-hj-np-z]{58}$")  # bech32: x25519 recipient
_SSH_RECIPIENT = re.compile(r"^ssh-ed25519 AAAAC3NzaC1lZDI1NTE5[A-Za-z0-9+/]+={0,2}( \S.*)?$")


def _age_recipient(value: str) -> str:
    """An age recipient: `age1...` (x25519, bech32, checksum checked) or an OpenSSH `ssh-ed25519 AAAA...` key."""
    import pyrage  # late: only a state with recipients pays for it

    if _AGE_RECIPIENT.match(value):
        try:
            pyrage.x25519.Recipient.from_str(value)
        except pyrage.RecipientError:
            raise ValueError("not a valid age recipient (bad bech32 checksum)") from None
        return value
    if _SSH_RECIPIENT.match(value):
        try:
            pyrage.ssh.Recipient.from_str(value)
        except pyrage.RecipientError:
            raise ValueError("not a valid ssh-ed25519 public key") from None
        return value
    raise ValueError("an age recipient is `age1...` (age-keygen, `reconciler secret keygen`) or an OpenSSH "
                     "`ssh-ed25519 AAAA...` public key")


class Secrets(Strict):
    """Who can read the repository's age-encrypted files: `reconciler secret encrypt/edit` encrypt to these."""

    recipients: list[Annotated[str, AfterValidator(_age_recipient)]] = Field(
        default_factory=list, description="Public keys: `age1...` (x25519) or `ssh-ed25519 AAAA...`; include the "
        "login node's (its age_identity) and each admin's")

    @field_validator("recipients")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        seen = [" ".join(v.split()[:2]) for v in value]
        twice = sorted({v for v in seen if seen.count(v) > 1})
        if twice:
            raise ValueError(f"recipient listed twice: {twice[0]}")
        return value


class Munge(Strict):
    """Where the munge key comes from: the login node (a file, a variable) or an age-encrypted file of the
    repository decrypted there; exactly one source."""

    key_file: AbsPath | None = Field(default=None, description="A file on the machine running the reconciler "
                                     "(outside the desired-state repository), e.g. /etc/reconciler/munge.key")
    key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                description="An environment variable of the reconciler holding the key in base64")
    key_age: Text | None = Field(default=None, description="An age-encrypted file of this repository (ending in "
                                 ".age, relative to the YAML file's directory), decrypted on the login node")
    _age: Any = PrivateAttr(default=None)  # key_age as read, never decrypted by the loader: agesecrets.Encrypted
    _key: bytes | None = PrivateAttr(default=None)  # key_age decrypted (agesecrets.unlock), else None

    @model_validator(mode="after")
    def _one_source(self) -> Munge:
        if sum(v is not None for v in (self.key_file, self.key_env, self.key_age)) != 1:
            raise ValueError("set exactly one of key_file and key_env (or key_age: an age-encrypted file of the "
                             "repository)")
        if self.key_age is not None and not self.key_age.endswith(AGE_SUFFIX):
            raise ValueError(f"key_age is an age-encrypted file whose name ends in {AGE_SUFFIX}")
        return self
