"""Loading never decrypts; the login node decrypts once, before planning; the plaintext reaches only the writer.

A wrong key, a damaged file or no identity for `apply` is an error at the `source:` entry's file:line, and the
command stops before any node is contacted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyrage
import pytest
from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.desired.agesecrets import NO_IDENTITY, has_encrypted, load_identities, require_identity, unlock
from reconciler.desired.loader import DesiredStateError, LoadedState, load_dir
from reconciler.drivers import all_drivers
from reconciler.engine.context import Context
from reconciler.engine.ops import WriteFile
from reconciler.engine.planner import make_plan
from reconciler.engine.remote_write import write_request
from reconciler.engine.report import render_json, render_markdown, render_text
from reconciler.facts.models import FileFact
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_planning import PrPlan
from tests.desired.secrets.conftest import FILES, PLAIN, SENTINEL, TARGET, Key, make_state
from tests.drivers.operations.test_operations import converged_facts

SOURCE_AT = "files.yaml:5:5"  # where `source: secrets/slurmdbd.conf.age` is


def no_decrypt(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Make any decryption fail loudly; return the calls."""
    calls: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> bytes:
        calls.append(args)
        raise AssertionError("pyrage.decrypt called where nothing may be decrypted")

    monkeypatch.setattr(pyrage, "decrypt", refuse)
    return calls


def unlocked(root: Path, key: Key) -> LoadedState:
    """ROOT loaded and decrypted with KEY."""
    loaded = load_dir(root)
    assert unlock(loaded, load_identities(key.identity), str(key.identity)) == 1
    return loaded


def all_texts(ctx: Context, plan: Any) -> list[str]:
    """Every way a plan is shown or stored."""
    pr = PrPlan(number=1, head_sha="a" * 40, head_ref="r", subdir="", status="ok", main_plan=plan, plan=plan)
    return [render_text(plan), render_text(plan, per_node=True), render_json(plan), render_json(plan, per_node=True),
            render_markdown(plan), render_markdown(plan, per_node=True), render_pr_comment(pr),
            plan.model_dump_json(), json.dumps(plan.model_dump(mode="json")), repr(plan), str(plan),
            "\n".join(plan.errors + plan.warnings + plan.consequences()), repr(ctx.loaded.state),
            ctx.loaded.state.model_dump_json(), repr(ctx.facts), ctx.facts.model_dump_json()]


def test_loading_keeps_the_ciphertext_and_never_decrypts(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = no_decrypt(monkeypatch)
    loaded = load_dir(state)
    [item] = loaded.state.files
    data = (state / "secrets" / "slurmdbd.conf.age").read_bytes()
    assert item.encrypted and item.secret  # an .age source implies secret: true
    assert item._age.sha256 == hashlib.sha256(data).hexdigest() and item._age.data == data
    assert item.text() is None and has_encrypted(loaded.state) and calls == []
    runner = CliRunner()
    result = runner.invoke(main, ["validate", str(state)])
    assert result.exit_code == 0, result.output
    assert calls == []


def test_plan_decrypted_once_shows_fingerprints_only(state: Path, key: Key) -> None:
    ctx = Context(loaded=unlocked(state, key), source="test")
    ctx.facts = converged_facts(ctx)
    plan = make_plan(ctx, all_drivers())
    [change] = [c for c in plan.changes if c.resource == TARGET]
    assert change.node == "login01" and change.action == "create" and not plan.errors
    fingerprint = "sha256:" + hashlib.sha256(PLAIN.encode()).hexdigest()
    assert f"<secret {fingerprint}>" in (change.diff or "")
    [write] = [op for op in change.ops if isinstance(op, WriteFile)]
    assert write.secret and write.mode == "0600" and write.owner == "slurm" and not write.backup
    assert [f.target for f in change.followups] == ["slurmdbd"]
    for text in all_texts(ctx, plan):
        assert SENTINEL not in text
    assert SENTINEL in write_request([write])  # only the remote writer's request carries it


def test_node_with_the_same_content_is_ok_and_another_is_an_update(state: Path, key: Key) -> None:
    ctx = Context(loaded=unlocked(state, key), source="test")
    ctx.facts = converged_facts(ctx)
    digest = hashlib.sha256(PLAIN.encode()).hexdigest()
    ctx.facts.nodes["login01"].files[TARGET] = FileFact(exists=True, sha256=digest, mode="0600", owner="slurm",
                                                        group="root")
    plan = make_plan(ctx, all_drivers())
    assert [c.action for c in plan.changes if c.resource == TARGET] == ["ok"] and not plan.has_changes
    ctx.facts.nodes["login01"].files[TARGET] = FileFact(exists=True, sha256="0" * 64, mode="0644", owner="slurm",
                                                        group="root")
    plan = make_plan(ctx, all_drivers())
    [change] = [c for c in plan.changes if c.resource == TARGET]
    assert change.action == "update" and "mode 0644 -> 0600" in change.summary and "content" in change.summary
    assert all(SENTINEL not in text for text in all_texts(ctx, plan))


def test_templated_encrypted_source_is_rendered_per_node_after_decryption(tmp_path: Path, key: Key) -> None:
    files = FILES.replace("    mode: \"0600\"\n", "    mode: \"0600\"\n    template: true\n")
    root = make_state(tmp_path, [key.recipient], plain=f"# {{node}}\nStoragePass={SENTINEL}\n", files=files)
    ctx = Context(loaded=unlocked(root, key), source="test")
    ctx.facts = converged_facts(ctx)
    [change] = [c for c in make_plan(ctx, all_drivers()).changes if c.resource == TARGET]
    [write] = change.ops
    assert isinstance(write, WriteFile) and write.content == f"# login01\nStoragePass={SENTINEL}\n"
    bad = make_state(tmp_path / "bad", [key.recipient], plain=f"{{{SENTINEL}}}\n", files=files)
    with pytest.raises(DesiredStateError) as info:
        unlocked(bad, key)
    assert str(info.value).startswith(f"{SOURCE_AT}: files[0].source: ") and "not a valid template" in str(info.value)
    assert SENTINEL not in str(info.value)  # the template error does not quote the secret text


def test_wrong_identity_is_an_error_at_the_source_entry(state: Path, other_key: Key) -> None:
    loaded = load_dir(state)
    with pytest.raises(DesiredStateError) as info:
        unlock(loaded, load_identities(other_key.identity), str(other_key.identity))
    [error] = info.value.errors
    assert str(error).startswith(f"{SOURCE_AT}: files[0].source: secrets/slurmdbd.conf.age: cannot decrypt")
    assert "not one of the file's recipients" in str(error)
    assert loaded.state.files[0].text() is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_damaged_file_is_an_error_at_the_source_entry(state: Path, key: Key, damage: str) -> None:
    path = state / "secrets" / "slurmdbd.conf.age"
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-20])
    elif damage == "flip":
        path.write_bytes(data[:-5] + bytes([data[-5] ^ 0x40]) + data[-4:])
    else:
        path.write_bytes(b"StoragePass=plain-text-by-mistake\n")
    if damage == "garbage":  # not even an age header: refused when loading, before any identity is needed
        with pytest.raises(DesiredStateError) as info:
            load_dir(state)
        assert str(info.value).startswith(f"{SOURCE_AT}: files[0].source: ")
        assert "is not an age-encrypted file" in str(info.value) and "plain-text-by-mistake" not in str(info.value)
        return
    loaded = load_dir(state)
    with pytest.raises(DesiredStateError) as info:
        unlock(loaded, load_identities(key.identity), str(key.identity))
    assert str(info.value).startswith(f"{SOURCE_AT}: files[0].source: secrets/slurmdbd.conf.age: not a valid age file")


def test_cli_apply_stops_before_any_node_with_a_wrong_key_a_damaged_file_or_no_identity(
        state: Path, key: Key, other_key: Key, monkeypatch: pytest.MonkeyPatch) -> None:
    """The errors come before the SSH transport is opened: nothing is applied (open_reconcile is never reached)."""
    import reconciler.engine.run as engine_run

    def no_ssh(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a node was contacted")

    monkeypatch.setattr(engine_run, "open_reconcile", no_ssh)
    runner = CliRunner()
    wrong = runner.invoke(main, ["apply", str(state), "--yes", "--age-identity", str(other_key.identity)])
    assert wrong.exit_code == 1, wrong.output
    assert f"error: {SOURCE_AT}: files[0].source: secrets/slurmdbd.conf.age: cannot decrypt" in wrong.stderr
    assert "nothing was applied" in wrong.stderr
    none = runner.invoke(main, ["apply", str(state), "--yes"])
    assert none.exit_code == 1 and f"error: {SOURCE_AT}: files[0].source: " in none.stderr
    assert NO_IDENTITY in none.stderr
    plan_wrong = runner.invoke(main, ["plan", str(state)], env={"RECONCILER_AGE_IDENTITY": str(other_key.identity)})
    assert plan_wrong.exit_code == 1 and "cannot decrypt" in plan_wrong.stderr
    missing = runner.invoke(main, ["plan", str(state), "--age-identity", str(state / "absent.key")])
    assert missing.exit_code == 1 and "age identity" in missing.stderr and "cannot read" in missing.stderr
    path = state / "secrets" / "slurmdbd.conf.age"
    path.write_bytes(path.read_bytes()[:-20])
    damaged = runner.invoke(main, ["apply", str(state), "--yes", "--age-identity", str(key.identity)])
    assert damaged.exit_code == 1 and "not a valid age file" in damaged.stderr
    for result in (wrong, none, plan_wrong, missing, damaged):
        assert SENTINEL not in result.output


def test_plan_without_identity_shows_an_error_per_node_not_a_comparison(state: Path) -> None:
    ctx = Context(loaded=load_dir(state), source="test")
    ctx.facts = converged_facts(ctx)
    plan = make_plan(ctx, all_drivers())
    [change] = [c for c in plan.changes if c.resource == TARGET]
    assert change.action == "error" and "not decrypted, cannot compare" in change.summary and not change.ops
    assert any("not decrypted" in e for e in plan.errors)
    with pytest.raises(DesiredStateError) as info:
        require_identity(ctx.loaded)
    assert str(info.value).startswith(f"{SOURCE_AT}: files[0].source: secrets/slurmdbd.conf.age is age-encrypted")


@pytest.mark.parametrize(("entry", "message"), [
    ("    secret: false\n", "always secret"),
    ("    content: inline\n", "exactly one of content and source"),
])
def test_encrypted_source_entry_errors(tmp_path: Path, key: Key, entry: str, message: str) -> None:
    root = make_state(tmp_path, [key.recipient], files=FILES + entry)
    with pytest.raises(DesiredStateError, match=message):
        load_dir(root)


@pytest.mark.parametrize(("recipients", "message"), [
    ('["age1qyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqs3290gp"]', "bad bech32 checksum"),  # last char
    ('["ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ"]', "an age recipient is"),
    ('["AGE-SECRET-KEY-1QQQ"]', "an age recipient is"),
])
def test_bad_recipients_are_refused_with_file_and_line(tmp_path: Path, key: Key, recipients: str,
                                                       message: str) -> None:
    root = make_state(tmp_path, [key.recipient])
    (root / "secrets.yaml").write_text(f"secrets:\n  recipients: {recipients}\n")
    with pytest.raises(DesiredStateError) as info:
        load_dir(root)
    assert str(info.value).startswith("secrets.yaml:2:16: secrets.recipients[0]: ") and message in str(info.value)


def test_duplicate_recipient_is_refused(tmp_path: Path, key: Key) -> None:
    root = make_state(tmp_path, [key.recipient])
    (root / "secrets.yaml").write_text(f"secrets:\n  recipients: [{key.recipient}, {key.recipient}]\n")
    with pytest.raises(DesiredStateError, match="recipient listed twice"):
        load_dir(root)
