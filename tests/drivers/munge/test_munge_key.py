"""The munge key driver without SSH: validation, reading the key, planning, follow-ups, and that the key never
leaks into a plan, a report, a PR comment or a repr (property test over random keys)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.checks.node import judge_munge
from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.munge_key import KEY_PATH, MungeKeyError, read_key
from reconciler.drivers.step_order import ORDER_COMPUTE, ORDER_CONTROLLER, ORDER_MUNGE
from reconciler.engine.context import Context
from reconciler.engine.ops import WriteFile
from reconciler.engine.planner import make_plan
from reconciler.engine.remote_write import WRITE_COMMAND, write_request
from reconciler.engine.report import render_json, render_markdown, render_text
from reconciler.facts.gather import GATHER_COMMAND, FactRequest
from reconciler.facts.models import FileFact, JobFact
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_planning import PrPlan
from reconciler.model import Munge
from tests.drivers.operations.test_operations import converged_facts

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "desired-state"
SLURM_NODES = ["dgx01", "dgx02", "dgx03", "dgx04", "login01"]


def with_munge(tmp: Path, text: str) -> Path:
    """A copy of the example desired state with a munge.yaml."""
    root = tmp / "state"
    if not root.exists():
        shutil.copytree(EXAMPLE, root)
    (root / "munge.yaml").write_text(text)
    return root


def key_fact(data: bytes, mode: str = "0400", owner: str = "munge") -> FileFact:
    """What the hash-only fact of a node's key looks like."""
    return FileFact(exists=True, sha256=hashlib.sha256(data).hexdigest(), mode=mode, owner=owner, group=owner,
                    size=len(data))


def context(root: Path, keys: dict[str, bytes]) -> Context:
    """The example cluster, converged but for the munge key, whose nodes hold KEYS."""
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = converged_facts(ctx)
    for node, data in keys.items():
        ctx.facts.nodes[node].files[KEY_PATH] = key_fact(data)
    return ctx


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(("text", "message"), [
    ("munge:\n  key_file: /etc/k\n  key_env: K\n", "set exactly one of key_file and key_env"),
    ("munge: {}\n", "set exactly one of key_file and key_env"),
    ("munge:\n  key_file: etc/k\n", "absolute"),
    ("munge:\n  key_env: 'NOT-A-NAME'\n", "should match pattern"),
    ("munge:\n  key_file: /etc/k\n  key: abc\n", "unknown key"),
])
def test_bad_munge_section_is_an_error_with_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    root = with_munge(tmp_path, "# the munge key\n" + text)
    with pytest.raises(DesiredStateError) as info:
        load_dir(root)
    errors = [str(e) for e in info.value.errors]
    assert any(e.split(": ", 1)[0] in ("munge.yaml:2:1", "munge.yaml:3:3", "munge.yaml:4:3") and message in e
               and ": munge" in e for e in errors), errors


def test_key_file_inside_the_repository_is_refused(tmp_path: Path) -> None:
    root = with_munge(tmp_path, "munge:\n  key_file: /placeholder\n")
    (root / "munge.yaml").write_text(f"munge:\n  key_file: {root / 'secrets' / 'munge.key'}\n")
    with pytest.raises(DesiredStateError) as info:
        load_dir(root)
    assert [str(e).split(": ", 1)[0] for e in info.value.errors] == ["munge.yaml:2:3"]
    assert "must not come from Git" in str(info.value)
    link = tmp_path / "outside.key"
    link.symlink_to(root / "cluster.yaml")  # a path outside that leads back in
    (root / "munge.yaml").write_text(f"munge:\n  key_file: {link}\n")
    with pytest.raises(DesiredStateError, match="inside the desired-state repository"):
        load_dir(root)


def test_no_munge_section_means_munge_is_not_managed() -> None:
    ctx = Context(loaded=load_dir(EXAMPLE), source="test")
    ctx.facts = converged_facts(ctx)
    plan = make_plan(ctx, all_drivers())
    assert not [c for c in plan.changes if c.driver == "munge_key"] and not plan.has_changes


# ---------------------------------------------------------------- reading the key


def test_read_key_from_file_and_env(tmp_path: Path) -> None:
    data = os.urandom(128)
    (tmp_path / "k").write_bytes(data)
    from_file = read_key(Munge(key_file=str(tmp_path / "k")))
    from_env = read_key(Munge(key_env="K"), {"K": base64.b64encode(data).decode()})
    assert from_file.sha256 == from_env.sha256 == hashlib.sha256(data).hexdigest()
    assert from_file.fingerprint == "sha256:" + hashlib.sha256(data).hexdigest()[:16]
    assert base64.b64encode(data).decode() not in repr(from_file) + str(from_env)


@pytest.mark.parametrize(("setup", "message"), [
    ("missing", "key_file {f}): cannot read: No such file or directory"),
    ("short", "key_file {f}): 31 bytes; a munge key has 32 to 1024 bytes"),
    ("long", "key_file {f}): more than 1024 bytes"),
    ("env-unset", "key_env K): the environment variable is not set"),
    ("env-bad", "key_env K): not valid base64"),
    ("env-short", "key_env K): 3 bytes"),
])
def test_unreadable_or_wrong_key_names_its_source(tmp_path: Path, setup: str, message: str) -> None:
    path = tmp_path / "k"
    env: dict[str, str] = {}
    if setup == "short":
        path.write_bytes(b"s" * 31)
    elif setup == "long":
        path.write_bytes(b"l" * 1025)
    elif setup == "env-bad":
        env["K"] = "not base64 !!!"
    elif setup == "env-short":
        env["K"] = base64.b64encode(b"abc").decode()
    munge = Munge(key_env="K") if setup.startswith("env") else Munge(key_file=str(path))
    with pytest.raises(MungeKeyError) as info:
        read_key(munge, env)
    assert message.format(f=path) in str(info.value)


def test_missing_key_is_a_plan_error_per_node(tmp_path: Path) -> None:
    root = with_munge(tmp_path, f"munge:\n  key_file: {tmp_path / 'absent.key'}\n")
    plan = make_plan(context(root, {}), all_drivers())
    errors = [c.node for c in plan.changes if c.driver == "munge_key" and c.action == "error"]
    assert sorted(errors) == SLURM_NODES  # nfs01 runs no Slurm: not ours
    assert any(f"key_file {tmp_path / 'absent.key'}): cannot read" in e for e in plan.errors)


# ---------------------------------------------------------------- planning and follow-ups


def test_rotation_plan_and_its_order(tmp_path: Path) -> None:
    old, new = os.urandom(1024), os.urandom(128)
    (tmp_path / "munge.key").write_bytes(new)
    root = with_munge(tmp_path, f"munge:\n  key_file: {tmp_path / 'munge.key'}\n")
    ctx = context(root, {n: old for n in SLURM_NODES})
    ctx.facts.jobs = [JobFact(job_id="42", state="RUNNING", nodes=["dgx02"])]
    plan = make_plan(ctx, all_drivers())
    munge = [c for c in plan.changing() if c.driver == "munge_key"]
    assert sorted(c.node for c in munge) == SLURM_NODES
    fp_old, fp_new = hashlib.sha256(old).hexdigest()[:16], hashlib.sha256(new).hexdigest()[:16]
    assert {c.summary for c in munge} == {f"update {KEY_PATH} (munge key sha256:{fp_old} -> sha256:{fp_new})"}
    op = munge[0].ops[0]
    assert isinstance(op, WriteFile) and (op.mode, op.owner, op.group, op.secret, op.backup) == (
        "0400", "munge", "munge", True, False)
    steps = [(f.order, f.kind, f.target, f.node) for f in plan.followups]
    assert steps == ([(ORDER_MUNGE, "restart", "munge", n) for n in ["dgx01", "dgx02", "dgx03", "dgx04", "login01"]]
                     + [(ORDER_CONTROLLER, "restart", "slurmctld", "login01")]
                     + [(ORDER_COMPUTE, "restart", "slurmd", n) for n in ["dgx01", "dgx02", "dgx03", "dgx04"]])
    slurmd = [f for f in plan.followups if f.target == "slurmd"]
    assert all(f.rolling and f.drain is not None and f.ready for f in slurmd)
    assert [f.jobs for f in slurmd if f.node == "dgx02"] == [["42"]]
    assert "restarts munge on dgx[01-04],login01" in "\n".join(plan.consequences())
    # the converged cluster plans nothing
    again = context(root, {n: new for n in SLURM_NODES})
    assert not make_plan(again, all_drivers()).has_changes


def test_mode_only_change_restarts_nothing_and_one_wrong_node_restarts_only_its_daemons(tmp_path: Path) -> None:
    key = os.urandom(64)
    (tmp_path / "munge.key").write_bytes(key)
    root = with_munge(tmp_path, f"munge:\n  key_file: {tmp_path / 'munge.key'}\n")
    ctx = context(root, {n: key for n in SLURM_NODES})
    ctx.facts.nodes["dgx01"].files[KEY_PATH] = key_fact(key, mode="0644")
    ctx.facts.nodes["dgx03"].files[KEY_PATH] = key_fact(b"x" * 64)
    plan = make_plan(ctx, all_drivers())
    assert [(c.node, c.summary) for c in plan.changing()] == [
        ("dgx01", f"update {KEY_PATH} (mode 0644 -> 0400)"),
        ("dgx03", f"update {KEY_PATH} (munge key sha256:{hashlib.sha256(b'x' * 64).hexdigest()[:16]} -> "
                  f"sha256:{hashlib.sha256(key).hexdigest()[:16]})")]
    assert [(f.kind, f.target, f.node) for f in plan.followups] == [("restart", "munge", "dgx03"),
                                                                     ("restart", "slurmd", "dgx03")]


def test_pull_request_plans_read_no_secret(tmp_path: Path) -> None:
    root = with_munge(tmp_path, "munge:\n  key_env: GITHUB_TOKEN\n")
    ctx = context(root, {})
    ctx.read_secrets = False
    plan = make_plan(ctx, all_drivers())
    assert not [c for c in plan.changes if c.driver == "munge_key"]
    assert any("reads no secrets" in w for w in plan.warnings)


# ---------------------------------------------------------------- the key never leaks


def _forms(data: bytes) -> list[str]:
    """Every spelling of the key worth grepping for."""
    b64 = base64.b64encode(data).decode()
    return [b64, b64[:40], data.hex(), data.hex()[:40], base64.urlsafe_b64encode(data).decode()[:40],
            data.decode("latin-1")[:32]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(new=st.binary(min_size=32, max_size=1024), old=st.binary(min_size=32, max_size=1024))
def test_the_key_never_appears_in_plans_reports_or_comments(tmp_path: Path, new: bytes, old: bytes) -> None:
    (tmp_path / "munge.key").write_bytes(new)
    root = with_munge(tmp_path, f"munge:\n  key_file: {tmp_path / 'munge.key'}\n")
    ctx = context(root, {"dgx01": old, "login01": old})
    plan = make_plan(ctx, all_drivers())
    assert plan.changing()
    pr = PrPlan(number=1, head_sha="a" * 40, head_ref="r", subdir="", status="ok", main_plan=plan, plan=plan)
    texts = [render_text(plan), render_text(plan, per_node=True), render_json(plan), render_json(plan, per_node=True),
             render_markdown(plan), render_markdown(plan, per_node=True), render_pr_comment(pr),
             plan.model_dump_json(), json.dumps(plan.model_dump(mode="json")), repr(plan), str(plan),
             repr(plan.changes), "\n".join(plan.errors + plan.warnings + plan.consequences()),
             repr(ctx.facts), ctx.facts.model_dump_json()]
    for text in texts:
        for form in _forms(new) + _forms(old):
            if len(set(form)) > 4:  # a key of one repeated byte is spelled inside any text
                assert form not in text
    for text in texts[:-2]:  # the facts hold the whole sha256 (as for any file); plans show 16 hex digits
        assert hashlib.sha256(new).hexdigest()[16:] not in text and hashlib.sha256(old).hexdigest()[16:] not in text
    assert base64.b64encode(new).decode() in write_request([o for c in plan.changing() for o in c.ops
                                                            if isinstance(o, WriteFile)])  # only the node gets it


# ---------------------------------------------------------------- the remote scripts (run locally)


def test_secret_write_keeps_no_backup_and_hash_only_fact_has_no_content(tmp_path: Path) -> None:
    target = tmp_path / "munge" / "munge.key"
    target.parent.mkdir()
    old, new = os.urandom(1024), os.urandom(128)
    target.write_bytes(old)
    (tmp_path / "munge" / "munge.key.reconciler-bak").write_bytes(old)  # left by someone: goes too
    op = WriteFile(path=str(target), content=base64.b64encode(new).decode(), encoding="base64", secret=True,
                   backup=False, mode="0400", expect_sha256=hashlib.sha256(old).hexdigest())
    done = subprocess.run(["sh", "-c", WRITE_COMMAND], input=write_request([op]), capture_output=True, text=True)
    assert json.loads(done.stdout) == [{"ok": True}], done.stderr
    assert target.read_bytes() == new and oct(target.stat().st_mode & 0o777) == "0o400"
    assert sorted(p.name for p in target.parent.iterdir()) == ["munge.key"]
    request = FactRequest(hashes=[str(target)], files=[str(tmp_path / "other")])
    facts = subprocess.run(["sh", "-c", GATHER_COMMAND], input=request.encode(), capture_output=True, text=True)
    item = json.loads(facts.stdout)["files"][str(target)]
    assert item["sha256"] == hashlib.sha256(new).hexdigest() and item["mode"] == "0400" and "content" not in item


# ---------------------------------------------------------------- the check's judging


def test_judge_munge_names_the_direction_that_failed() -> None:
    assert judge_munge("gpu01", "ctl", "decode ok", "decode ok").ok
    item = judge_munge("gpu01", "ctl", "decode failed: unmunge: Error: Invalid credential", "decode ok")
    assert item.status == "fail" and "credential from ctl not decoded on gpu01 (unmunge: Error: Invalid " in item.message
    item = judge_munge("gpu01", "ctl", "decode ok", None)
    assert item.message == "munge: credential from gpu01 not decoded on ctl (no answer)"
