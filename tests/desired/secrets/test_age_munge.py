"""`munge: {key_age: secrets/munge.key.age}`: the munge key from an age-encrypted file of the repository."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from reconciler.desired.agesecrets import encrypt, load_identities, unlock
from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.munge_key import KEY_PATH, MungeKeyError, read_key
from reconciler.engine.context import Context
from reconciler.engine.ops import WriteFile
from reconciler.engine.planner import make_plan
from reconciler.engine.remote_write import write_request
from tests.desired.secrets.conftest import Key, make_state
from tests.desired.secrets.test_age_plan import all_texts, no_decrypt
from tests.drivers.operations.test_operations import converged_facts

KEY = os.urandom(128)


def with_munge_age(tmp: Path, key: Key, data: bytes = KEY, munge: str = "munge:\n  key_age: secrets/munge.key.age\n"
                   ) -> Path:
    """The example state with the munge key encrypted to KEY in secrets/munge.key.age."""
    root = make_state(tmp, [key.recipient], files="files: []\n")
    (root / "secrets" / "munge.key.age").write_bytes(encrypt(data, [key.recipient]))
    (root / "munge.yaml").write_text(munge)
    return root


def test_key_age_is_read_as_ciphertext_and_decrypted_by_unlock(tmp_path: Path, key: Key,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = with_munge_age(tmp_path, key)
    with monkeypatch.context() as patch:
        no_decrypt(patch)
        loaded = load_dir(root)
        assert loaded.state.munge is not None and loaded.state.munge._age is not None
        with pytest.raises(MungeKeyError, match="key_age secrets/munge.key.age.*not decrypted"):
            read_key(loaded.state.munge)
    assert unlock(loaded, load_identities(key.identity), str(key.identity)) == 1
    munge_key = read_key(loaded.state.munge)
    assert munge_key.sha256 == hashlib.sha256(KEY).hexdigest() and munge_key.source == "key_age secrets/munge.key.age"


def test_plan_writes_the_decrypted_key_and_shows_only_its_fingerprint(tmp_path: Path, key: Key) -> None:
    loaded = load_dir(with_munge_age(tmp_path, key))
    unlock(loaded, load_identities(key.identity), str(key.identity))
    ctx = Context(loaded=loaded, source="test")
    ctx.facts = converged_facts(ctx)
    plan = make_plan(ctx, all_drivers())
    changes = [c for c in plan.changes if c.resource == KEY_PATH]
    assert changes and all(c.action == "create" for c in changes) and not plan.errors
    assert f"munge key sha256:{hashlib.sha256(KEY).hexdigest()[:16]}" in changes[0].summary
    b64 = base64.b64encode(KEY).decode()
    for text in all_texts(ctx, plan):
        assert b64[:40] not in text and KEY.hex()[:40] not in text
    writes = [op for c in changes for op in c.ops if isinstance(op, WriteFile)]
    assert b64 in write_request(writes)


@pytest.mark.parametrize(("munge", "message"), [
    ("munge:\n  key_age: ../munge.key.age\n", "outside the desired-state repository"),
    ("munge:\n  key_age: secrets/absent.age\n", "no such file in the repository"),
    ("munge:\n  key_age: /etc/munge.key.age\n", "relative to the YAML file's directory"),
    ("munge:\n  key_age: secrets/munge.key\n", "ends in .age"),
    ("munge:\n  key_age: secrets/munge.key.age\n  key_env: K\n", "set exactly one of key_file and key_env"),
])
def test_bad_key_age_is_refused_with_file_and_line(tmp_path: Path, key: Key, munge: str, message: str) -> None:
    root = with_munge_age(tmp_path, key, munge=munge)
    (tmp_path / "munge.key.age").write_bytes(encrypt(KEY, [key.recipient]))  # the one outside the repository
    with pytest.raises(DesiredStateError) as info:
        load_dir(root)
    assert str(info.value).split(": ", 1)[0] in ("munge.yaml:2:3", "munge.yaml:1:1") and message in str(info.value)


def test_wrong_identity_or_size_is_an_error_at_key_age(tmp_path: Path, key: Key, other_key: Key) -> None:
    loaded = load_dir(with_munge_age(tmp_path, key))
    with pytest.raises(DesiredStateError) as info:
        unlock(loaded, load_identities(other_key.identity), str(other_key.identity))
    assert str(info.value).startswith("munge.yaml:2:3: munge.key_age: secrets/munge.key.age: cannot decrypt")
    small = load_dir(with_munge_age(tmp_path / "small", key, data=b"short"))
    with pytest.raises(DesiredStateError) as info:
        unlock(small, load_identities(key.identity), str(key.identity))
    assert str(info.value).startswith("munge.yaml:2:3: munge.key_age: ") and "decrypts to 5 bytes" in str(info.value)
