"""`reconciler secret`: age-encrypted files of the desired state (encrypt, edit, keygen), as agenix and SOPS do.

Recipients come from the desired state's `secrets.recipients`; the identity that decrypts comes from
`--age-identity` or RECONCILER_AGE_IDENTITY. Plaintext is written only to a private temporary file for the
editor (0600, in a 0700 directory, removed whatever happens) and never printed. Errors are one line; exit 1.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

import click
from pydantic import ValidationError

from reconciler.cli.support import CLUSTER
from reconciler.desired.agesecrets import AgeError, Encrypted, decrypt, encrypt, identity_path, load_identities
from reconciler.desired.clusters import need_cluster, read_cluster
from reconciler.desired.errors import nearest
from reconciler.desired.layout import is_multi_cluster
from reconciler.desired.loader import ConfigError, DesiredStateError, KeyPath, Location, merge_files, yaml_files
from reconciler.model import AGE_SUFFIX, Secrets

MAX_PLAINTEXT_BYTES = 1 << 20  # what a managed file's source may hold (managed.MAX_SOURCE_BYTES)


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def read_recipients(directory: str | Path, cluster: str | None = None) -> list[str]:
    """`secrets.recipients` of a desired-state directory (its YAML files only: the rest need not be valid); of
    CLUSTER's merged layers in a multi-cluster repository."""
    root = Path(directory)
    if not root.is_dir():
        raise DesiredStateError([ConfigError(None, (), f"{root}: not a directory")])
    errors: list[ConfigError] = []
    if is_multi_cluster(root):
        layers, _ = read_cluster(root, need_cluster(root, cluster), errors)
        merged, locations = layers.data, layers.locations
    elif cluster is not None:
        raise DesiredStateError([ConfigError(None, (), f"--cluster {cluster}: {root} is a single-cluster desired "
                                             "state (it has no clusters/ directory)")])
    else:
        merged, locations = merge_files(root, yaml_files(root), errors)
    if errors:
        raise DesiredStateError(errors)
    raw = merged.get("secrets")
    if raw is None:
        raise DesiredStateError([ConfigError(None, ("secrets",), f"{root}: no `secrets: {{recipients: [...]}}` "
                                             "section: whom to encrypt to")])
    try:
        secrets = Secrets.model_validate(raw)
    except ValidationError as exc:
        found = []
        for err in exc.errors():
            path: KeyPath = ("secrets", *(p for p in err["loc"] if isinstance(p, int | str)))
            where: Location | None = nearest(locations, path)
            found.append(ConfigError(where, path, err["msg"].removeprefix("Value error, ")))
        raise DesiredStateError(found) from None
    if not secrets.recipients:
        raise DesiredStateError([ConfigError(nearest(locations, ("secrets",)), ("secrets", "recipients"),
                                             "no recipients: whom to encrypt to")])
    return secrets.recipients


def _recipients_or_exit(directory: str, cluster: str | None) -> list[str]:
    try:
        return read_recipients(directory, cluster)
    except DesiredStateError as exc:
        _fail(str(exc.errors[0]) + (f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""))


def _identities_or_exit(option: str | None) -> tuple[list[object], str]:
    path = identity_path(option)
    if path is None:
        _fail("no age identity: give --age-identity PATH or set RECONCILER_AGE_IDENTITY")
    try:
        return load_identities(path), path
    except AgeError as exc:
        _fail(str(exc))


def write_atomically(target: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace TARGET by DATA: a temporary file beside it, fsync, rename (keeping TARGET's mode if it exists)."""
    with contextlib.suppress(OSError):
        mode = target.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _check_output(output: str) -> Path:
    if not output.endswith(AGE_SUFFIX):
        _fail(f"{output}: the name of an encrypted file ends in {AGE_SUFFIX} (only those are decrypted)")
    target = Path(output)
    if not target.parent.is_dir():
        _fail(f"{output}: no such directory {target.parent}")
    return target


AGE_IDENTITY = click.option("--age-identity", default=None, type=click.Path(dir_okay=False),
                            help="Identity file that decrypts (default: RECONCILER_AGE_IDENTITY).")


@click.group()
def secret() -> None:
    """Age-encrypted files of the desired state: `source: x.age` in files:, `munge: {key_age: ...}`."""


@secret.command("encrypt")
@click.argument("directory", type=click.Path(file_okay=False))
@click.argument("plainfile", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-o", "--output", required=True, help="The encrypted file to write (its name ends in .age).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@CLUSTER
def encrypt_command(directory: str, plainfile: str, output: str, force: bool, cluster: str | None) -> None:
    """Encrypt PLAINFILE (`-`: standard input) to the recipients of DIRECTORY's `secrets.recipients`."""
    recipients = _recipients_or_exit(directory, cluster)
    target = _check_output(output)
    if target.exists() and not force:
        _fail(f"{output} exists (--force replaces it; `reconciler secret edit` changes it)")
    try:
        if plainfile == "-":
            data = sys.stdin.buffer.read(MAX_PLAINTEXT_BYTES + 1)
        else:
            with open(plainfile, "rb") as handle:
                data = handle.read(MAX_PLAINTEXT_BYTES + 1)
    except OSError as exc:
        _fail(f"{plainfile}: cannot read: {exc.strerror or type(exc).__name__}")
    if len(data) > MAX_PLAINTEXT_BYTES:
        _fail(f"{plainfile} is larger than {MAX_PLAINTEXT_BYTES} bytes")
    try:
        write_atomically(target, encrypt(data, recipients))
    except AgeError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{output}: cannot write: {exc.strerror or type(exc).__name__}")
    click.echo(f"{output}: encrypted to {len(recipients)} recipient(s)", err=True)


@secret.command("edit")
@click.argument("directory", type=click.Path(file_okay=False))
@click.argument("file", type=click.Path(dir_okay=False))
@AGE_IDENTITY
@CLUSTER
def edit_command(directory: str, file: str, age_identity: str | None, cluster: str | None) -> None:
    """Decrypt FILE into a private temporary file, run $EDITOR on it, and encrypt the result to DIRECTORY's
    `secrets.recipients` (atomic replace). Unchanged content leaves FILE untouched; a new FILE starts empty."""
    recipients = _recipients_or_exit(directory, cluster)
    target = _check_output(file)
    before = b""
    if target.exists():
        identities, path = _identities_or_exit(age_identity)
        try:
            before = decrypt(Encrypted.of(file, target.read_bytes()), identities, path)
        except AgeError as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(f"{file}: cannot read: {exc.strerror or type(exc).__name__}")
    editor = os.environ.get("EDITOR") or "vi"
    private = tempfile.mkdtemp(prefix="reconciler-secret-")  # 0700
    try:
        plain = Path(private) / (target.name.removesuffix(AGE_SUFFIX) or "secret")
        fd = os.open(plain, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(before)
        try:
            status = subprocess.run([*shlex.split(editor), str(plain)]).returncode
        except OSError as exc:
            _fail(f"cannot run the editor {editor!r}: {exc.strerror or type(exc).__name__}; {file} untouched")
        if status != 0:
            _fail(f"the editor {editor!r} exited {status}; {file} untouched")
        after = plain.read_bytes()
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if after == before:
        click.echo(f"{file}: unchanged", err=True)
        return
    if len(after) > MAX_PLAINTEXT_BYTES:
        _fail(f"the edited text is larger than {MAX_PLAINTEXT_BYTES} bytes; {file} untouched")
    try:
        write_atomically(target, encrypt(after, recipients))
    except AgeError as exc:
        _fail(f"{exc}; {file} untouched")
    except OSError as exc:
        _fail(f"{file}: cannot write: {exc.strerror or type(exc).__name__}")
    click.echo(f"{file}: encrypted to {len(recipients)} recipient(s)", err=True)


@secret.command("keygen")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The identity file to create (mode 0600; never replaced).")
def keygen_command(output: str) -> None:
    """Create an age identity file (as age-keygen does) and print its public key (the recipient) on stdout."""
    import pyrage

    identity = pyrage.x25519.Identity.generate()
    public = str(identity.to_public())
    created = datetime.now(UTC).replace(microsecond=0).isoformat()
    text = f"# created: {created}\n# public key: {public}\n{identity}\n"
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _fail(f"{output} exists: an identity is never replaced")
    except OSError as exc:
        _fail(f"{output}: cannot create: {exc.strerror or type(exc).__name__}")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    click.echo(public)


@secret.command("rekey")
@click.argument("directory", type=click.Path(file_okay=False))
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@AGE_IDENTITY
@CLUSTER
def rekey_command(directory: str, files: tuple[str, ...], age_identity: str | None, cluster: str | None) -> None:
    """Re-encrypt FILES, content unchanged, to DIRECTORY's current `secrets.recipients` (after adding or removing
    one). Every file is decrypted first: if one fails, none is rewritten."""
    recipients = _recipients_or_exit(directory, cluster)
    identities, path = _identities_or_exit(age_identity)
    plain: list[tuple[Path, bytes]] = []
    for file in files:
        target = _check_output(file)
        try:
            plain.append((target, decrypt(Encrypted.of(file, target.read_bytes()), identities, path)))
        except AgeError as exc:
            _fail(f"{exc}; nothing re-encrypted")
        except OSError as exc:
            _fail(f"{file}: cannot read: {exc.strerror or type(exc).__name__}; nothing re-encrypted")
    for target, data in plain:
        try:
            write_atomically(target, encrypt(data, recipients))
        except (AgeError, OSError) as exc:
            _fail(f"{target}: {exc}")
    click.echo(f"{len(plain)} file(s) re-encrypted to {len(recipients)} recipient(s)", err=True)
