"""Before-images and their restore (a rollout with nothing to roll back to): captured from the facts a plan was
made from, put back by the real remote writer and real shell commands, run by a local `sh` on files in a
temporary directory (tests/ha/local_shell.py); the facts are read by the real fact script the same way."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reconciler.desired.loader import load_dir
from reconciler.drivers.base import file_change
from reconciler.drivers.node_state import NodeStateDriver
from reconciler.drivers.services import ServicesDriver
from reconciler.engine.apply import ApplyOptions, apply_plan
from reconciler.engine.before_image import BeforeImage, RestoreItem, capture
from reconciler.engine.context import Context
from reconciler.engine.followups import service
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.plan import Change, Plan
from reconciler.engine.restore import restore, undo_followups
from reconciler.engine.undo import Restore
from reconciler.facts.gather import GATHER_COMMAND, FactRequest
from reconciler.facts.models import FileFact, NodeFacts, ServiceFact, SlurmNodeFact
from reconciler.model import ManagedService
from reconciler.rollout.rollback_text import rollback_lines
from tests.engine.testbed_state import write_state
from tests.ha.local_shell import LocalShell, spec

NODE = "gpu01"


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    """A context of a small desired state (its nodes: ctl, gpu[01-02]); facts are set by each test."""
    desired = write_state(tmp_path / "desired", name="bi", state_dir=tmp_path, subnet="10.77.0",
                          computes="gpu[01-02]")
    return Context(loaded=load_dir(desired), source="test")


def read_facts(ctx: Context, *paths: Path, node: str = NODE) -> NodeFacts:
    """Gather PATHS with the real fact script (through a local shell) into CTX's facts of NODE."""
    done = LocalShell().run(spec(node), GATHER_COMMAND, stdin=FactRequest(files=[str(p) for p in paths]).encode())
    assert done.ok, done.stderr
    files = {path: FileFact(**item) for path, item in json.loads(done.stdout)["files"].items()}
    facts = ctx.facts.nodes[node] = NodeFacts(node=node, reachable=True, files=files)
    return facts


def forward(ctx: Context, path: Path, desired: str, mode: str = "0644") -> Plan:
    """The plan a managed-file driver makes for PATH from the facts gathered."""
    change = file_change("managed_files", NODE, str(path), ctx.facts.nodes[NODE].files.get(str(path)), desired,
                         phase=50, mode=mode)
    return Plan(source="test", changes=[change])


def stamp(path: Path) -> tuple[int, int]:
    """Inode and mtime: a rewrite changes them."""
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def test_a_changed_file_gets_its_bytes_mode_and_owner_back_and_a_second_restore_changes_nothing(
        ctx: Context, tmp_path: Path) -> None:
    target = tmp_path / "etc" / "prolog.sh"
    target.parent.mkdir()
    target.write_bytes(b"#!/bin/sh\n# tab\there, no newline at the end\nexit 0")
    os.chmod(target, 0o750)
    before = target.read_bytes()
    read_facts(ctx, target)
    plan = forward(ctx, target, "#!/bin/sh\nexit 1\n", mode="0755")
    image = capture(ctx, plan)
    shell = LocalShell()
    assert apply_plan(ctx, plan, shell).ok
    assert target.read_text() == "#!/bin/sh\nexit 1\n" and oct(target.stat().st_mode & 0o777) == "0o755"

    read_facts(ctx, target)  # the restore runs on facts gathered at rollback time
    report = restore(ctx, image, shell, ApplyOptions())
    assert report.ok and report.not_restored == {} and report.unchanged == {}
    assert target.read_bytes() == before and oct(target.stat().st_mode & 0o777) == "0o750"
    assert report.restored == {NODE: [f"{target} back to its {len(before)} bytes before the apply, "
                                      "mode 0750 root:root"]}

    stamps = stamp(target)
    again = restore(ctx, image, shell, ApplyOptions())
    assert again.restored == {} and again.unchanged == {NODE: [str(target)]} and again.ok
    assert stamp(target) == stamps


def test_a_change_that_never_landed_is_left_alone(ctx: Context, tmp_path: Path) -> None:
    target = tmp_path / "x.conf"
    target.write_text("old\n")
    read_facts(ctx, target)
    image = capture(ctx, forward(ctx, target, "new\n"))  # planned, never applied (the node failed before it)
    stamps = stamp(target)
    report = restore(ctx, image, LocalShell(), ApplyOptions())
    assert report.unchanged == {NODE: [str(target)]} and report.restored == {} and report.ok
    assert stamp(target) == stamps and target.read_text() == "old\n"


def test_a_created_file_is_removed_unless_someone_changed_it_since(ctx: Context, tmp_path: Path) -> None:
    made, edited = tmp_path / "made.conf", tmp_path / "edited.conf"
    read_facts(ctx, made, edited)
    plan = Plan(source="test", changes=[*forward(ctx, made, "a\n").changes, *forward(ctx, edited, "b\n").changes])
    assert [c.action for c in plan.changes] == ["create", "create"]
    image = capture(ctx, plan)
    shell = LocalShell()
    assert apply_plan(ctx, plan, shell).ok
    edited.write_text("b\nan admin's line\n")

    read_facts(ctx, made, edited)
    report = restore(ctx, image, shell, ApplyOptions())
    assert not made.exists()
    assert edited.read_text() == "b\nan admin's line\n"  # not ours any more: kept, and said so
    assert report.restored == {NODE: [f"removed {made} (it did not exist before)"]}
    assert report.not_restored == {NODE: [f"{edited}: remove {edited}: {edited} changed since the apply: "
                                          "not removed"]}
    assert not report.ok


def test_a_file_changed_by_someone_after_the_apply_is_not_overwritten(ctx: Context, tmp_path: Path) -> None:
    target = tmp_path / "y.conf"
    target.write_text("old\n")
    read_facts(ctx, target)
    plan = forward(ctx, target, "new\n")
    image = capture(ctx, plan)
    shell = LocalShell()
    assert apply_plan(ctx, plan, shell).ok
    target.write_text("an admin's fix\n")
    report = restore(ctx, image, shell, ApplyOptions())
    assert target.read_text() == "an admin's fix\n"
    (why,) = report.not_restored[NODE]
    assert why.startswith(f"{target}: {target}: file changed on the node since facts were gathered"), why
    assert report.restored == {}


def test_what_has_no_before_image_is_named_and_never_called_restored(ctx: Context, tmp_path: Path) -> None:
    big, binary, text = tmp_path / "big.bin", tmp_path / "latin1.conf", tmp_path / "t.conf"
    big.write_text("x" * 100)
    binary.write_bytes(b"caf\xe9\n")
    text.write_text("t\n")
    done = LocalShell().run(spec(NODE), GATHER_COMMAND, stdin=FactRequest(files=[str(big), str(binary), str(text)],
                                                                         max_bytes=50).encode())
    files = {p: FileFact(**i) for p, i in json.loads(done.stdout)["files"].items()}
    ctx.facts.nodes[NODE] = NodeFacts(node=NODE, reachable=True, files=files)
    secret = WriteFile(path=str(text), content="key", secret=True, backup=False)
    changes = [Change(node=NODE, driver="d", resource=str(big), action="update",
                      ops=[WriteFile(path=str(big), content="y\n")]), forward(ctx, binary, "cafe\n").changes[0],
               Change(node=NODE, driver="munge_key", resource=str(text), action="update", ops=[secret]),
               Change(node=NODE, driver="accounting", resource="qos normal", action="update",
                      ops=[RunCommand(command="sacctmgr -i modify qos normal set priority=10",
                                      description="sacctmgr modify qos normal")]),
               forward(ctx, tmp_path / "unread.conf", "z\n").changes[0]]
    ctx.facts.nodes[NODE].files.pop(str(tmp_path / "unread.conf"), None)
    image = capture(ctx, Plan(source="test", changes=changes))
    assert [i.restore.missing for i in image.items] == [
        f"{big} was too large to keep a copy of (100 bytes)",
        f"{binary} is not UTF-8 text: its old bytes were not read back whole",
        f"{text} is a secret: its old content is never read off the node",
        "it ran commands with no known undo: sacctmgr modify qos normal",
        f"the plan read no before-image of {tmp_path / 'unread.conf'}"]
    shell = LocalShell()
    report = restore(ctx, image, shell, ApplyOptions())
    assert shell.sent == [] and report.restored == {} and not report.ok
    assert len(report.not_restored[NODE]) == 5
    lines = rollback_lines({"nodes": NODE, "before_image": True, **report.as_dict(), "resumed": []})
    assert lines[0] == "NOT restored:" and not any("rolled back" in line or "restored to" in line for line in lines)


def test_an_unreachable_node_is_not_restored(ctx: Context, tmp_path: Path) -> None:
    target = tmp_path / "z.conf"
    target.write_text("old\n")
    read_facts(ctx, target)
    image = capture(ctx, forward(ctx, target, "new\n"))
    ctx.facts.nodes[NODE] = NodeFacts(node=NODE, reachable=False, error="connection refused")
    shell = LocalShell()
    report = restore(ctx, image, shell, ApplyOptions())
    assert report.not_restored == {NODE: [f"{target}: {NODE} unreachable (connection refused)"]}
    assert shell.sent == []


def test_a_later_wave_keeps_the_first_before_image_of_a_resource() -> None:
    first = RestoreItem(node=NODE, driver="d", resource="/f", phase=1, restore=Restore(summary="the old one"))
    again = RestoreItem(node=NODE, driver="d", resource="/f", phase=1, restore=Restore(summary="half applied"))
    other = RestoreItem(node="gpu02", driver="d", resource="/f", phase=1, restore=Restore(summary="gpu02's"))
    image = BeforeImage(items=[first])
    image.add(BeforeImage(items=[again, other]))
    assert [i.restore.summary for i in image.items] == ["the old one", "gpu02's"]


def test_the_restore_mirrors_the_phases_and_needs_the_same_follow_ups() -> None:
    steps = [service(NODE, "start", "slurmd", 30, "slurmd is not running on gpu01", jobs=["12"]),
             service("gpu02", "restart", "slurmd", 30, "gres.conf changed"),
             service("gpu03", "restart", "slurmd", 30, "gres.conf changed")]
    out = undo_followups(steps, {NODE, "gpu02"})
    assert [(f.node, f.kind, f.phase, f.jobs) for f in out] == [(NODE, "restart", -30, []),
                                                                ("gpu02", "restart", -30, [])]
    assert out[1].reasons == ["restoring: gres.conf changed"]


def test_a_service_change_carries_its_inverse_as_its_before_image(ctx: Context) -> None:
    ctx.state.services = [ManagedService(name="chronyd", nodes=NODE, state="running")]
    facts = NodeFacts(node=NODE, reachable=True, services={"chronyd": ServiceFact(name="chronyd", running=False)})
    (change,) = ServicesDriver().plan(ctx, NODE, facts)
    assert change.restore is not None
    assert [op.command for op in change.restore.ops if isinstance(op, RunCommand)] == ["supervisorctl stop chronyd"]
    assert change.restore.summary == "stop chronyd (as before: not running)"


def test_rollback_lines_say_rolled_back_only_for_what_was() -> None:
    done = {"nodes": "gpu01", "before_image": True, "restored": {NODE: ["/etc/slurm/prolog.sh back to ..."]},
            "unchanged": {}, "not_restored": {}, "resumed": [NODE]}
    assert rollback_lines(done) == ["restored to the state the apply found (no --previous):",
                                    "  gpu01: /etc/slurm/prolog.sh back to ...",
                                    "  gpu01: resumed (drained during the rollout)"]
    assert rollback_lines({"nodes": "gpu01", "ok": True, "to": "0123456789abcdef", "resumed": []}) == [
        "rolled back gpu01 to commit 0123456789ab"]
    failed = rollback_lines({"nodes": "gpu01", "ok": False, "to": None, "errors": ["gpu01: exit 1"]})
    assert failed == ["rollback of gpu01 to the --previous state FAILED: gpu01: exit 1"]
    assert rollback_lines({}) == []


def test_a_drain_change_carries_how_to_put_the_node_back(tmp_path: Path) -> None:
    desired = write_state(tmp_path / "desired", name="bi", state_dir=tmp_path, subnet="10.77.0",
                          computes="gpu[01-02]")
    nodes = desired / "nodes.yaml"
    nodes.write_text(nodes.read_text().replace("    roles: [compute]\n", "    roles: [compute]\n    drain: bad fan\n"))
    ctx = Context(loaded=load_dir(desired), source="test")
    ctx.facts.slurm_nodes = {"gpu01": SlurmNodeFact(name="gpu01", state="IDLE"),
                             "gpu02": SlurmNodeFact(name="gpu02", state="IDLE+DRAIN", reason="reconciler: disk")}
    ctx.facts.nodes["ctl"] = NodeFacts(node="ctl", reachable=True)
    changes = {c.node: c for c in NodeStateDriver().plan(ctx, "ctl", ctx.facts.nodes["ctl"]) if c.changing}
    one, two = changes["gpu01"].restore, changes["gpu02"].restore
    assert one is not None and two is not None
    assert one.summary == "resumed (not drained before)" and one.check and "DRAIN" in one.check
    assert [op.command for op in one.ops if isinstance(op, RunCommand)] == ["scontrol update nodename=gpu01 state=resume"]
    assert two.summary == "drained again (reconciler: disk)" and two.check is None
