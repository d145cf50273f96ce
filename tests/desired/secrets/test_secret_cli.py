"""`reconciler secret keygen/encrypt/edit`: real age keys, real files; plaintext only where it must be."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from reconciler.cli.main import main
from reconciler.desired.agesecrets import Encrypted, decrypt, load_identities, looks_encrypted
from tests.desired.secrets.conftest import PLAIN, SENTINEL, Key, make_state


def cli(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> Result:
    """The reconciler command line, in process."""
    return CliRunner().invoke(main, list(args), env=env, input=stdin)


def plaintext(path: Path, key: Key) -> bytes:
    """PATH decrypted with KEY."""
    return decrypt(Encrypted.of(str(path), path.read_bytes()), load_identities(key.identity), str(key.identity))


def editor(tmp: Path, body: str) -> str:
    """An $EDITOR: a Python script that records where and how it was called (record.json beside it), then runs
    BODY with `path` bound to the file to edit."""
    script = tmp / "editor.py"
    record = tmp / "record.json"
    script.write_text(
        "import json, os, stat, sys\n"
        "path = sys.argv[1]\n"
        "st = os.stat(path)\n"
        f"json.dump({{'path': path, 'mode': stat.S_IMODE(st.st_mode), "
        "'dir_mode': stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), "
        f"'text': open(path).read()}}, open({str(record)!r}, 'w'))\n" + body)
    return f"{sys.executable} {script}"


def test_keygen_writes_a_private_identity_and_prints_its_recipient(tmp_path: Path) -> None:
    out = tmp_path / "age.key"
    result = cli("secret", "keygen", "-o", str(out))
    assert result.exit_code == 0, result.output
    recipient = result.stdout.strip()
    assert recipient.startswith("age1") and len(recipient) == 62
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert f"# public key: {recipient}" in out.read_text()
    [identity] = load_identities(out)
    assert str(identity.to_public()) == recipient
    before = out.read_bytes()
    again = cli("secret", "keygen", "-o", str(out))
    assert again.exit_code == 1 and "exists" in again.stderr and out.read_bytes() == before


def test_encrypt_then_decrypt_round_trip(tmp_path: Path, key: Key, other_key: Key) -> None:
    root = make_state(tmp_path, [key.recipient, other_key.recipient])
    plain = tmp_path / "slurmdbd.conf"
    plain.write_text(PLAIN)
    out = root / "secrets" / "new.conf.age"
    result = cli("secret", "encrypt", str(root), str(plain), "-o", str(out))
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert looks_encrypted(data) and SENTINEL.encode() not in data and SENTINEL not in result.output
    assert plaintext(out, key) == PLAIN.encode() == plaintext(out, other_key)  # both recipients can read it
    # from standard input, and an existing file is replaced only with --force
    assert cli("secret", "encrypt", str(root), "-", "-o", str(out), stdin=b"x").exit_code == 1
    forced = cli("secret", "encrypt", str(root), "-", "-o", str(out), "--force", stdin=b"from stdin\n")
    assert forced.exit_code == 0, forced.output
    assert plaintext(out, key) == b"from stdin\n"


@pytest.mark.parametrize(("secrets_yaml", "message"), [
    (None, "no `secrets: {recipients: [...]}` section"),
    ("secrets:\n  recipients: []\n", "no recipients"),
    ("secrets:\n  recipients: [age1notarecipient]\n", "secrets.yaml:2:16: secrets.recipients[0]: an age recipient"),
])
def test_encrypt_without_usable_recipients_is_a_one_line_error(tmp_path: Path, key: Key, secrets_yaml: str | None,
                                                                 message: str) -> None:
    root = make_state(tmp_path, [key.recipient])
    if secrets_yaml is None:
        (root / "secrets.yaml").unlink()
    else:
        (root / "secrets.yaml").write_text(secrets_yaml)
    (tmp_path / "p").write_text("x")
    result = cli("secret", "encrypt", str(root), str(tmp_path / "p"), "-o", str(root / "secrets" / "x.age"))
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not (root / "secrets" / "x.age").exists()


def test_encrypt_refuses_an_output_not_ending_in_age(tmp_path: Path, key: Key) -> None:
    root = make_state(tmp_path, [key.recipient])
    (tmp_path / "p").write_text("x")
    result = cli("secret", "encrypt", str(root), str(tmp_path / "p"), "-o", str(root / "secrets" / "x.enc"))
    assert result.exit_code == 1 and "ends in .age" in result.stderr
    assert not (root / "secrets" / "x.enc").exists()


def test_edit_decrypts_into_a_private_temp_file_and_reencrypts(tmp_path: Path, key: Key, other_key: Key) -> None:
    root = make_state(tmp_path, [key.recipient])
    target = root / "secrets" / "slurmdbd.conf.age"
    # a second admin joins: the edit re-encrypts to the current recipients
    (root / "secrets.yaml").write_text(f"secrets:\n  recipients: [{key.recipient}, {other_key.recipient}]\n")
    command = editor(tmp_path, "open(path, 'a').write('StoragePort=6819\\n')\n")
    result = cli("secret", "edit", str(root), str(target), "--age-identity", str(key.identity),
                 env={"EDITOR": command})
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["text"] == PLAIN  # the editor saw the plaintext...
    assert record["mode"] == 0o600 and record["dir_mode"] == 0o700  # ...in a private file of a private dir
    assert not Path(record["path"]).exists() and not Path(record["path"]).parent.exists()  # removed after
    assert Path(record["path"]).name == "slurmdbd.conf"
    assert plaintext(target, key) == (PLAIN + "StoragePort=6819\n").encode() == plaintext(target, other_key)
    assert SENTINEL not in result.output


def test_edit_with_unchanged_content_leaves_the_file_untouched(tmp_path: Path, key: Key) -> None:
    root = make_state(tmp_path, [key.recipient])
    target = root / "secrets" / "slurmdbd.conf.age"
    before, mtime = target.read_bytes(), target.stat().st_mtime_ns
    result = cli("secret", "edit", str(root), str(target), env={"EDITOR": editor(tmp_path, ""),
                                                                "RECONCILER_AGE_IDENTITY": str(key.identity)})
    assert result.exit_code == 0 and "unchanged" in result.stderr
    assert target.read_bytes() == before and target.stat().st_mtime_ns == mtime
    assert not Path(json.loads((tmp_path / "record.json").read_text())["path"]).parent.exists()


def test_edit_with_a_failing_editor_or_the_wrong_key_changes_nothing(tmp_path: Path, key: Key,
                                                                      other_key: Key) -> None:
    root = make_state(tmp_path, [key.recipient])
    target = root / "secrets" / "slurmdbd.conf.age"
    before = target.read_bytes()
    failing = editor(tmp_path, "open(path, 'w').write('half-written')\nsys.exit(3)\n")
    result = cli("secret", "edit", str(root), str(target), "--age-identity", str(key.identity),
                 env={"EDITOR": failing})
    assert result.exit_code == 1 and "exited 3" in result.stderr and "untouched" in result.stderr
    assert target.read_bytes() == before
    assert not Path(json.loads((tmp_path / "record.json").read_text())["path"]).parent.exists()
    wrong = cli("secret", "edit", str(root), str(target), "--age-identity", str(other_key.identity),
                env={"EDITOR": failing})
    assert wrong.exit_code == 1 and "not one of the file's recipients" in wrong.stderr
    assert wrong.stderr.count("\n") == 1 and target.read_bytes() == before
    missing = cli("secret", "edit", str(root), str(target), env={"EDITOR": failing})
    assert missing.exit_code == 1 and "no age identity" in missing.stderr


def test_edit_of_a_new_file_creates_it_and_an_empty_one_is_not_created(tmp_path: Path, key: Key) -> None:
    root = make_state(tmp_path, [key.recipient])
    new = root / "secrets" / "token.age"
    empty = cli("secret", "edit", str(root), str(new), env={"EDITOR": editor(tmp_path, "")})
    assert empty.exit_code == 0 and not new.exists()
    result = cli("secret", "edit", str(root), str(new),
                 env={"EDITOR": editor(tmp_path, "open(path, 'w').write('tok-123')\n")})
    assert result.exit_code == 0, result.output
    assert plaintext(new, key) == b"tok-123"


def test_ssh_ed25519_recipient_and_openssh_identity(tmp_path: Path) -> None:
    """agenix's usual set-up: the login node's SSH host key is the recipient and the identity."""
    import subprocess

    ssh_key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh_key)], check=True)
    recipient = (tmp_path / "id_ed25519.pub").read_text().strip()
    root = make_state(tmp_path, [recipient])
    target = root / "secrets" / "slurmdbd.conf.age"
    assert decrypt(Encrypted.of("x", target.read_bytes()), load_identities(ssh_key), "k") == PLAIN.encode()
    rsa = tmp_path / "id_rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(rsa)], check=True)
    (root / "secrets.yaml").write_text(f"secrets:\n  recipients: [\"{(tmp_path / 'id_rsa.pub').read_text().strip()}\"]\n")
    (tmp_path / "p").write_text("x")
    refused = cli("secret", "encrypt", str(root), str(tmp_path / "p"), "-o", str(root / "secrets" / "y.age"))
    assert refused.exit_code == 1 and "ssh-ed25519" in refused.stderr


def test_bad_identity_files_are_named_without_their_content(tmp_path: Path) -> None:
    from reconciler.desired.agesecrets import AgeError

    bad = tmp_path / "bad.key"
    bad.write_text("# comment\nAGE-SECRET-KEY-1NOTAKEY-SECRETISH\n")
    with pytest.raises(AgeError) as info:
        load_identities(bad)
    assert "line 2" in str(info.value) and "SECRETISH" not in str(info.value)
    with pytest.raises(AgeError, match="cannot read"):
        load_identities(tmp_path / "absent.key")
    os.chmod(bad, 0o600)
    bad.write_text("# only comments\n")
    with pytest.raises(AgeError, match="no AGE-SECRET-KEY-1 line"):
        load_identities(bad)


def test_rekey_reencrypts_to_the_current_recipients_or_nothing(tmp_path: Path, key: Key, other_key: Key) -> None:
    root = make_state(tmp_path, [key.recipient])
    target = root / "secrets" / "slurmdbd.conf.age"
    second = root / "secrets" / "second.age"
    assert cli("secret", "encrypt", str(root), "-", "-o", str(second), stdin=b"two").exit_code == 0
    (root / "secrets.yaml").write_text(f"secrets:\n  recipients: [{key.recipient}, {other_key.recipient}]\n")
    junk = root / "secrets" / "junk.age"
    junk.write_bytes(b"age-encryption.org/v1\n-> X25519 broken\n")
    before = (target.read_bytes(), second.read_bytes())
    failed = cli("secret", "rekey", str(root), str(target), str(junk), "--age-identity", str(key.identity))
    assert failed.exit_code == 1 and "nothing re-encrypted" in failed.stderr
    assert (target.read_bytes(), second.read_bytes()) == before
    result = cli("secret", "rekey", str(root), str(target), str(second), "--age-identity", str(key.identity))
    assert result.exit_code == 0, result.output
    assert plaintext(target, other_key) == PLAIN.encode() and plaintext(second, other_key) == b"two"
    assert SENTINEL not in result.output
