"""Secrets in Git, encrypted with age (issue 24): the loader keeps ciphertext, the login node decrypts it.

The loader never decrypts: for each `.age` file a `files:` entry (`source:`) or `munge: {key_age: ...}` names, it
keeps the bytes and their sha256 (`Encrypted`), which is all a pull request's plan needs (it compares ciphertexts
with the main branch's). `unlock` decrypts every one of a loaded state once, with the login node's identity (CLI:
`--age-identity` or RECONCILER_AGE_IDENTITY; daemon: `age_identity` in its config), before anything is planned: a
wrong key or a damaged file is a load error at the entry's file:line, so nothing is applied. The plaintext lives
only in the model's private attributes (never dumped), and plans, logs, JSON, PR comments and the state database
show `<secret sha256:...>` fingerprints, as for `secret: true`. The cryptography is pyrage's (rage, the Rust age).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.desired.errors import ConfigError, DesiredStateError, KeyPath, LoadedState
from reconciler.model import DesiredState, ManagedFile, Munge, template_fields

# what a managed file's source may hold, plain or decrypted, and what fact gathering reads of a file for comparing
# (here, below managed, which re-exports it, so that neither module imports the other both ways)
MAX_SOURCE_BYTES = 1 << 20
MAX_CIPHERTEXT_BYTES = MAX_SOURCE_BYTES + (64 << 10)  # a 1 MiB source and age's overhead
MAX_IDENTITY_BYTES = 64 << 10
MUNGE_MIN_BYTES, MUNGE_MAX_BYTES = 32, 1024  # as drivers/munge_key.py: what munged accepts
AGE_MAGIC = (b"age-encryption.org/v1\n", b"-----BEGIN AGE ENCRYPTED FILE-----")
NO_IDENTITY = "no age identity given (--age-identity PATH or RECONCILER_AGE_IDENTITY; the daemon: age_identity)"


class AgeError(ValueError):
    """An identity, a recipient or an encrypted file that cannot be used; the message is one line, never a secret."""


@dataclass(frozen=True)
class Encrypted:
    """An age-encrypted file of the repository as the loader read it (ciphertext only)."""

    path: str  # as the YAML names it, for messages
    data: bytes = field(repr=False)
    sha256: str = ""

    @classmethod
    def of(cls, path: str, data: bytes) -> Encrypted:
        """The ciphertext DATA of the file PATH, with its sha256."""
        return cls(path, data, hashlib.sha256(data).hexdigest())

    @property
    def fingerprint(self) -> str:
        """How plans name a ciphertext: `sha256:` and its first 16 hex digits."""
        return f"sha256:{self.sha256[:16]}"


def looks_encrypted(data: bytes) -> bool:
    """True when DATA starts as an age file does (binary or ASCII-armored); nothing is decrypted."""
    return data.startswith(AGE_MAGIC)


def read_encrypted(target: Path, shown: str) -> Encrypted:
    """Read an .age file's ciphertext (bounded; its header checked, nothing decrypted); AgeError names SHOWN."""
    try:
        with open(target, "rb") as handle:
            data = handle.read(MAX_CIPHERTEXT_BYTES + 1)
    except OSError as exc:
        raise AgeError(f"{shown}: cannot read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_CIPHERTEXT_BYTES:
        raise AgeError(f"{shown} is larger than {MAX_CIPHERTEXT_BYTES} bytes")
    if not looks_encrypted(data):
        raise AgeError(f"{shown} is not an age-encrypted file (no age header): encrypt it with "
                       "`reconciler secret encrypt`")
    return Encrypted.of(shown, data)


def load_identities(path: str | Path) -> list[Any]:
    """The age identities of an identity file: `AGE-SECRET-KEY-1...` lines (age-keygen, `reconciler secret keygen`;
    `#` comments) or an unencrypted OpenSSH ed25519 private key. AgeError names the file, never its content."""
    import pyrage

    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_IDENTITY_BYTES + 1)
    except OSError as exc:
        raise AgeError(f"age identity {path}: cannot read: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_IDENTITY_BYTES:
        raise AgeError(f"age identity {path}: larger than {MAX_IDENTITY_BYTES} bytes: not an identity file")
    if b"-----BEGIN OPENSSH PRIVATE KEY-----" in raw:
        try:
            return [pyrage.ssh.Identity.from_buffer(raw)]
        except pyrage.IdentityError as exc:
            raise AgeError(f"age identity {path}: not a usable OpenSSH key ({_one_line(exc)})") from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise AgeError(f"age identity {path}: not an age identity file (not ASCII)") from None
    identities = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith("AGE-SECRET-KEY-1"):
            raise AgeError(f"age identity {path}: line {number} is not an age secret key (AGE-SECRET-KEY-1...)")
        try:
            identities.append(pyrage.x25519.Identity.from_str(line))
        except pyrage.IdentityError:
            raise AgeError(f"age identity {path}: line {number} is not a valid age secret key") from None
    if not identities:
        raise AgeError(f"age identity {path}: no AGE-SECRET-KEY-1 line")
    return identities


def recipients_of(values: Iterable[str]) -> list[Any]:
    """pyrage recipients of `age1...` and `ssh-ed25519 ...` strings (validated already by model.Secrets)."""
    import pyrage

    out = []
    for value in values:
        try:
            out.append(pyrage.x25519.Recipient.from_str(value) if value.startswith("age1")
                       else pyrage.ssh.Recipient.from_str(value))
        except pyrage.RecipientError as exc:
            raise AgeError(f"recipient {value[:24]}...: {_one_line(exc)}") from None
    return out


def encrypt(data: bytes, recipients: Iterable[str]) -> bytes:
    """DATA encrypted to every recipient (binary age format)."""
    import pyrage

    parsed = recipients_of(recipients)
    if not parsed:
        raise AgeError("no recipients: add `secrets: {recipients: [age1...]}` to the desired state")
    try:
        return bytes(pyrage.encrypt(data, parsed))
    except pyrage.EncryptError as exc:
        raise AgeError(f"cannot encrypt: {_one_line(exc)}") from None


def decrypt(encrypted: Encrypted, identities: list[Any], identity: str) -> bytes:
    """The plaintext of ENCRYPTED; AgeError says whether the key is wrong or the file damaged (IDENTITY names it)."""
    import pyrage

    try:
        return bytes(pyrage.decrypt(encrypted.data, identities))
    except pyrage.DecryptError as exc:
        why = _one_line(exc)
        if "no matching key" in why.lower():
            raise AgeError(f"{encrypted.path}: cannot decrypt with the age identity {identity}: it is not one of "
                           "the file's recipients (re-encrypt it to secrets.recipients: `reconciler secret edit`)"
                           ) from None
        raise AgeError(f"{encrypted.path}: not a valid age file (corrupted or truncated?): {why}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


# ---------------------------------------------------------------- a loaded desired state


def entries(state: DesiredState) -> Iterator[tuple[KeyPath, ManagedFile | Munge, Encrypted | None]]:
    """Every age-encrypted input of STATE: (key path of its YAML entry, the entry, its ciphertext as loaded)."""
    for index, item in enumerate(state.files):
        if item.encrypted:
            yield ("files", index, "source"), item, item._age
    if state.munge is not None and state.munge.key_age is not None:
        yield ("munge", "key_age"), state.munge, state.munge._age


def has_encrypted(state: DesiredState) -> bool:
    """True when STATE takes something from an age-encrypted file."""
    return next(entries(state), None) is not None


def read_munge_age(state: DesiredState, root: Path, yaml_file: str | None) -> list[tuple[KeyPath, str]]:
    """Read `munge.key_age` (relative to the directory of YAML_FILE, which names it; inside ROOT) as ciphertext;
    return the problems as (key path, message)."""
    munge = state.munge
    if munge is None or munge.key_age is None:
        return []
    where: KeyPath = ("munge", "key_age")
    if Path(munge.key_age).is_absolute():
        return [(where, f"key_age must be relative to the YAML file's directory, got {munge.key_age!r}")]
    target = ((root / (yaml_file or "x")).parent / munge.key_age).resolve()
    if not target.is_relative_to(root.resolve()):
        return [(where, f"key_age {munge.key_age!r} is outside the desired-state repository")]
    if not target.is_file():
        return [(where, f"key_age {munge.key_age!r}: no such file in the repository")]
    try:
        munge._age = read_encrypted(target, munge.key_age)
    except AgeError as exc:
        return [(where, str(exc))]
    return []


def require_identity(loaded: LoadedState) -> None:
    """Raise DesiredStateError, at each encrypted entry's file:line, when LOADED needs an identity (none given)."""
    errors = [ConfigError(loaded.where(path), path, f"{enc.path if enc else path[-1]} is age-encrypted and "
                          f"{NO_IDENTITY}") for path, _, enc in entries(loaded.state)]
    if errors:
        raise DesiredStateError(errors)


def unlock(loaded: LoadedState, identities: list[Any], identity: str) -> int:
    """Decrypt every age-encrypted input of LOADED once, with IDENTITIES (read from the file IDENTITY), into the
    model's private attributes; return how many. Raise DesiredStateError with file:line for each that fails:
    a wrong key, a damaged file, text that is not UTF-8, a bad template or munge key size."""
    errors: list[ConfigError] = []
    plain: dict[str, bytes | AgeError] = {}  # by ciphertext sha256: one file named twice is decrypted once
    count = 0
    for path, owner, enc in entries(loaded.state):
        if enc is None:  # the loader did not read it (a state built by hand)
            errors.append(ConfigError(loaded.where(path), path, "the encrypted file was not read"))
            continue
        if enc.sha256 not in plain:
            try:
                plain[enc.sha256] = decrypt(enc, identities, identity)
            except AgeError as exc:
                plain[enc.sha256] = exc
        data = plain[enc.sha256]
        problem = str(data) if isinstance(data, AgeError) else _store(owner, enc, data)
        if problem:
            errors.append(ConfigError(loaded.where(path), path, problem))
        else:
            count += 1
    if errors:
        raise DesiredStateError(errors)
    return count


def _store(owner: ManagedFile | Munge, enc: Encrypted, data: bytes) -> str | None:
    """Keep the plaintext on its entry; the problem (never the content) when it cannot be what the entry needs."""
    if isinstance(owner, Munge):
        if not MUNGE_MIN_BYTES <= len(data) <= MUNGE_MAX_BYTES:
            return (f"{enc.path}: decrypts to {len(data)} bytes; a munge key has {MUNGE_MIN_BYTES} to "
                    f"{MUNGE_MAX_BYTES} bytes (`mungekey` makes 128)")
        owner._key = data
        return None
    if len(data) > MAX_SOURCE_BYTES:
        return f"{enc.path}: decrypts to more than {MAX_SOURCE_BYTES} bytes"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"{enc.path}: decrypts to something that is not UTF-8 text"
    if owner.template:
        try:
            template_fields(text)
        except ValueError:  # its message quotes the text: not for a secret
            return (f"{enc.path} (decrypted) is not a valid template: a {{...}} that is not one of the known "
                    "variables, or a lone brace (write a literal brace as {{ or }})")
    owner._source_text = text
    return None


def identity_path(option: str | None) -> str | None:
    """The identity file to use: the option's, else RECONCILER_AGE_IDENTITY's, else None."""
    return option or os.environ.get("RECONCILER_AGE_IDENTITY") or None
