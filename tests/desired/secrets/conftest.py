"""Fixtures of the age-secrets tests: real pyrage keys in temporary directories, and a desired state whose
files: entry takes its content from an .age file holding a sentinel password."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pyrage
import pytest

from reconciler.desired.agesecrets import encrypt
from tests.forge.conftest import _fresh_memory_cache, fake, forge, origin, sleeps  # noqa: F401 - PR fixtures

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "desired-state"
SENTINEL = "hunter2-SENTINEL-7f3a9c51"  # grep every output for it
PLAIN = f"StoragePass={SENTINEL}\nStorageUser=slurm\n"
TARGET = "/etc/slurm/slurmdbd.conf"
FILES = """\
# secrets of the cluster
files:
  - path: /etc/slurm/slurmdbd.conf
    nodes: login01
    source: secrets/slurmdbd.conf.age
    mode: "0600"
    owner: slurm
    notify: ["restart slurmdbd"]
"""


@dataclass
class Key:
    """An identity file and its public recipient."""

    identity: Path
    recipient: str


def make_key(directory: Path, name: str = "age.key") -> Key:
    """A fresh x25519 identity written as age-keygen does (0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    identity = pyrage.x25519.Identity.generate()
    path = directory / name
    path.write_text(f"# public key: {identity.to_public()}\n{identity}\n")
    path.chmod(0o600)
    return Key(path, str(identity.to_public()))


@pytest.fixture
def key(tmp_path: Path) -> Key:
    """The login node's identity."""
    return make_key(tmp_path / "keys")


@pytest.fixture
def other_key(tmp_path: Path) -> Key:
    """An identity that is not a recipient of anything."""
    return make_key(tmp_path / "other", "other.key")


def make_state(tmp: Path, recipients: list[str], plain: str = PLAIN, files: str = FILES) -> Path:
    """A copy of the example desired state with `secrets.recipients`, FILES, and secrets/slurmdbd.conf.age
    holding PLAIN encrypted to RECIPIENTS."""
    root = tmp / "state"
    if not root.exists():
        shutil.copytree(EXAMPLE, root)
    quoted = ", ".join(f'"{r}"' for r in recipients)
    (root / "secrets.yaml").write_text(f"secrets:\n  recipients: [{quoted}]\n")
    (root / "files.yaml").write_text(files)
    (root / "secrets").mkdir(exist_ok=True)
    (root / "secrets" / "slurmdbd.conf.age").write_bytes(encrypt(plain.encode(), recipients))
    return root


@pytest.fixture
def state(tmp_path: Path, key: Key) -> Path:
    """The example cluster with slurmdbd.conf from an .age file encrypted to KEY."""
    return make_state(tmp_path, [key.recipient])


@pytest.fixture(autouse=True)
def _no_identity_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILER_AGE_IDENTITY", raising=False)
