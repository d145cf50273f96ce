"""Operation tests: facts + desired state -> changes and commands, no SSH (pyinfra's operation tests)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.mountpoints import make_command
from reconciler.drivers.patches import PatchError, apply_edit
from reconciler.drivers.slurm_consequences import slurm_conf_consequence
from reconciler.engine.context import Context
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.planner import make_plan
from reconciler.facts.models import (
    ClusterFacts,
    FileFact,
    JobFact,
    MountFact,
    NodeFacts,
    ServiceFact,
    SlurmNodeFact,
    StatFact,
)
from reconciler.model import Patch
from reconciler.render import managed_files_for, render_file
from reconciler.render.files import file_path

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "desired-state"


def _file(content: str) -> FileFact:
    import hashlib

    return FileFact(exists=True, sha256=hashlib.sha256(content.encode()).hexdigest(), mode="0644", owner="root",
                    group="root", size=len(content), content=content)


def converged_facts(ctx: Context) -> ClusterFacts:
    """Facts of a cluster that already matches the desired state."""
    state = ctx.state
    facts = ClusterFacts(controller=ctx.controller)
    for name in node_specs(state):
        node = NodeFacts(node=name, reachable=True)
        for managed in managed_files_for(state, name):
            text = render_file(state, name, managed, ctx.source)
            node.files[file_path(state, managed)] = _file(text)
        for mount in state.storage.mounts:
            node.mounts.append(MountFact(source=mount.source, mountpoint=mount.mountpoint, fstype="nfs", options=[]))
        for patch in state.patches:
            node.files[patch.path] = (_file(patch.content) if patch.content is not None
                                      else _file(f"#!/bin/sh\n{patch.replace}\n"))
            if patch.content is not None:
                node.files[patch.path].mode = patch.mode
        for image in state.images:
            node.stats[image.path] = StatFact(exists=True, size=4096, mtime=1)
        node.services = {s: ServiceFact(name=s, running=True) for s in ("munge", "slurmd", "slurmctld")}
        facts.nodes[name] = node
    for name in ("dgx01", "dgx02", "dgx03", "dgx04"):
        facts.slurm_nodes[name] = SlurmNodeFact(name=name, state="IDLE")
    return facts


@pytest.fixture
def ctx() -> Context:
    loaded = load_dir(EXAMPLE)
    context = Context(loaded=loaded, source="desired-state @ test")
    context.facts = converged_facts(context)
    return context


def test_converged_cluster_plans_nothing(ctx: Context) -> None:
    plan = make_plan(ctx, all_drivers())
    assert [c for c in plan.changes if c.action != "ok"] == []
    assert not plan.has_changes


def test_new_commit_alone_does_not_rewrite_slurm_conf(ctx: Context) -> None:
    ctx.source = "desired-state @ another-commit"
    assert not make_plan(ctx, all_drivers()).has_changes


def test_hand_edit_on_one_node_is_drift_on_that_node_only(ctx: Context) -> None:
    path = "/etc/slurm/slurm.conf"
    edited = ctx.facts.nodes["dgx03"].files[path].content.replace("MaxTime=01:00:00", "MaxTime=09:00:00")
    ctx.facts.nodes["dgx03"].files[path] = _file(edited)
    plan = make_plan(ctx, all_drivers())
    changing = plan.changing()
    assert [(c.node, c.resource, c.action) for c in changing] == [("dgx03", path, "update")]
    assert "-PartitionName=debug Nodes=dgx[01-02] MaxTime=09:00:00" in changing[0].diff
    assert [(f.node, f.kind, f.target) for f in plan.followups] == [("login01", "command", "scontrol reconfigure")]


def test_port_change_restarts_every_slurmd_in_place_without_draining(ctx: Context) -> None:
    """SlurmdPort: reconfigure, then every slurmd restarts; slurmctld does not (observed on 22.05 and 24.11). The
    restart keeps running job steps (slurmstepd outlives slurmd: tests/params/test_job_kill_steps_testbed.py),
    so no node is drained for it (issue 43 item 2)."""
    ctx.state.cluster.slurm_conf.SlurmdPort = 6999
    ctx.facts.jobs = [JobFact(job_id="1234", state="RUNNING", nodes=["dgx02", "dgx03"])]
    plan = make_plan(ctx, all_drivers())
    steps = {(f.node, f.kind, f.target): f for f in plan.followups}
    assert list(steps) == [("login01", "command", "scontrol reconfigure"), *[(n, "restart", "slurmd") for n in
                                                                   ("dgx01", "dgx02", "dgx03", "dgx04")]]
    slurmd = [f for (_, _, t), f in steps.items() if t == "slurmd"]
    assert all(f.rolling and f.drain is None for f in slurmd)
    text = " ".join(plan.consequences())
    assert "will be drained" not in text
    assert "restarts slurmd on dgx[01-04] (4 nodes); in place on dgx[02-03], not drained: their running jobs keep " \
           "running" in text


def test_a_slurmd_restart_for_a_key_that_also_restarts_slurmctld_still_drains(ctx: Context) -> None:
    """SlurmdSpoolDir restarts both daemons (its steps' sockets live there): not a slurmd-only change, the busy
    node is drained first."""
    ctx.state.cluster.slurm_conf.SlurmdSpoolDir = "/var/spool/slurmd2"
    ctx.facts.jobs = [JobFact(job_id="1234", state="RUNNING", nodes=["dgx02"])]
    plan = make_plan(ctx, all_drivers())
    slurmd = [f for f in plan.followups if f.target == "slurmd"]
    assert slurmd and all(f.drain is not None for f in slurmd)


@pytest.mark.parametrize(("family", "restart"), [("22.05", True), ("23.02", True), ("23.11", False), ("24.11", False)])
def test_select_type_params_restart_depends_on_version(family: str, restart: bool) -> None:
    before = "ClusterName=c\nSelectTypeParameters=CR_Core\n"
    after = "ClusterName=c\nSelectTypeParameters=CR_Core_Memory\n"
    result = slurm_conf_consequence(before, after, family)
    assert result.reconfigure and result.restart_slurmctld is restart


@pytest.mark.parametrize(("family", "restart"), [("22.05", True), ("23.11", True), ("24.05", True), ("24.11", False)])
def test_adding_nodes_restarts_slurmctld_and_every_slurmd_before_24_11(family: str, restart: bool) -> None:
    """slurm.conf.5 22.05-24.05 and SchedMD's FAQ (reconfigure from 24.11); a slurmctld restart alone left the other
    slurmds unable to forward to the new node (tests/params/test_forwarding_testbed.py)."""
    before = "ClusterName=c\nNodeName=n[1-2] CPUs=4\nPartitionName=p Nodes=n[1-2]\n"
    after = "ClusterName=c\nNodeName=n[1-3] CPUs=4\nPartitionName=p Nodes=n[1-3]\n"
    result = slurm_conf_consequence(before, after, family)
    assert result.restart_slurmctld is restart and result.restart_all_slurmd is restart


@pytest.mark.parametrize(("family", "expected"), [
    ("22.05", ["login01 restart slurmctld", *[f"dgx0{i} restart slurmd" for i in range(1, 5)]]),
    ("24.11", ["login01 command scontrol reconfigure"]),
])
def test_gpu_count_change_follows_the_family(ctx: Context, family: str, expected: list[str]) -> None:
    """Node Gres and gres.conf: 22.05 needs slurmctld then each slurmd restarted (claimed before: slurmd only),
    24.11 only reconfigure (claimed before: slurmd restarts), as observed on the testbed."""
    ctx.state.cluster.slurm_version = family
    ctx.state.cluster.node_sets[0].gpus.count = 4  # type: ignore[union-attr]
    ctx.state.cluster.gres.lines[0].file = "/dev/nvidia[0-3]"  # type: ignore[union-attr]
    plan = make_plan(ctx, all_drivers())
    changed = {c.resource.rsplit("/", 1)[-1] for c in plan.changing()}
    assert changed == {"slurm.conf", "gres.conf"}, changed
    assert [f"{f.node} {f.kind} {f.target}" for f in plan.followups] == expected


def _was_on_every_node(ctx: Context, edit: Callable[[str], str]) -> None:
    """The slurm.conf every node holds now is EDIT of the desired one (what the commit changes back)."""
    path = "/etc/slurm/slurm.conf"
    for node in ctx.facts.nodes.values():
        if path in node.files:
            node.files[path] = _file(edit(node.files[path].content or ""))


@pytest.mark.parametrize(("family", "verb"), [("22.05", "restart"), ("24.11", "start")])
def test_a_slurmctld_restart_is_followed_by_a_reconfigure_for_the_slurmds(ctx: Context, family: str,
                                                                          verb: str) -> None:
    """Claimed before: the slurmctld restart (22.05: MaxJobCount; 24.11: a slurmctld found stopped) made the
    reconfigure needless, so the slurmds (not restarted) kept the old file: the partition change never reached
    them. scontrol.1: only reconfigure makes the slurmds re-read."""
    ctx.state.cluster.slurm_version = family
    extra = "MaxJobCount=20000\n" if verb == "restart" else ""
    _was_on_every_node(ctx, lambda t: t.replace("MaxTime=01:00:00", "MaxTime=09:00:00") + extra)
    if verb == "start":
        ctx.facts.nodes["login01"].services["slurmctld"] = ServiceFact(name="slurmctld", running=False)
    plan = make_plan(ctx, all_drivers())
    assert [f"{f.node} {f.kind} {f.target}" for f in plan.followups] == [
        f"login01 {verb} slurmctld", "login01 command scontrol reconfigure"]
    assert "after the slurmctld restart" in plan.followups[1].reasons[0]
    text = "\n".join(plan.consequences())
    assert text.index(f"{verb}s slurmctld") < text.index("runs `scontrol reconfigure`"), text


@pytest.mark.parametrize(("family", "expected"), [
    ("22.05", ["login01 restart slurmctld", *[f"dgx0{i} restart slurmd" for i in range(1, 5)]]),
    ("24.05", ["login01 restart slurmctld", *[f"dgx0{i} restart slurmd" for i in range(1, 5)]]),
    ("24.11", ["login01 command scontrol reconfigure"]),
])
def test_removing_a_node_restarts_every_slurmd_before_24_11(ctx: Context, family: str, expected: list[str]) -> None:
    """slurm.conf.5 22.05-24.05: all slurmds must know each node to forward messages (their restart reads the
    file, so no reconfigure follows); SchedMD's FAQ: reconfigure from 24.11. Claimed before: slurmctld alone
    (22.05), reconfigure (24.05)."""
    ctx.state.cluster.slurm_version = family
    _was_on_every_node(ctx, lambda t: t + "NodeName=dgx09 CPUs=4\n")
    plan = make_plan(ctx, all_drivers())
    assert [f"{f.node} {f.kind} {f.target}" for f in plan.followups] == expected


def test_fstab_user_lines_survive(ctx: Context) -> None:
    path = "/etc/fstab"
    ctx.facts.nodes["dgx01"].files[path] = _file("UUID=abc / ext4 defaults 0 1\n/dev/sdb /scratch xfs defaults 0 0\n")
    change = next(c for c in make_plan(ctx, all_drivers()).changing() if c.node == "dgx01" and c.resource == path)
    write = change.ops[0]
    assert isinstance(write, WriteFile)
    assert write.content.startswith("UUID=abc / ext4 defaults 0 1\n/dev/sdb /scratch xfs defaults 0 0\n# BEGIN")
    assert write.content.rstrip().endswith("# END reconciler managed")


def test_missing_mount_is_mounted(ctx: Context) -> None:
    ctx.facts.nodes["dgx02"].mounts = [m for m in ctx.facts.nodes["dgx02"].mounts if m.mountpoint != "/shared"]
    changes = [c for c in make_plan(ctx, all_drivers()).changing() if c.node == "dgx02"]
    assert [c.resource for c in changes] == ["mount /shared"]
    assert changes[0].ops == [RunCommand(command=f"{make_command('/shared')} && mount /shared",
                                         description="mount nfs01:/export/shared on /shared")]


def test_exports_change_is_validated_by_exportfs(ctx: Context) -> None:
    ctx.state.storage.exports[0].options = ["ro"]
    change = next(c for c in make_plan(ctx, all_drivers()).changing() if c.resource == "/etc/exports")
    assert change.node == "nfs01" and change.ops[0].after.endswith("&& exportfs -ra")  # type: ignore[union-attr]


def test_admin_drain_is_kept_and_our_rollout_drain_resumed(ctx: Context) -> None:
    ctx.facts.slurm_nodes["dgx01"] = SlurmNodeFact(name="dgx01", state="IDLE+DRAIN", reason="maintenance")
    ctx.facts.slurm_nodes["dgx02"] = SlurmNodeFact(name="dgx02", state="IDLE+DRAIN",
                                                   reason="reconciler: rolling restart of slurmd")
    ctx.facts.slurm_nodes["dgx03"] = SlurmNodeFact(name="dgx03", state="IDLE+DRAIN",
                                                   reason="reconciler: nccl all_reduce busbw 120.3 < 330 GB/s")
    changes = [c for c in make_plan(ctx, all_drivers()).changing() if c.driver == "node_state"]
    assert [(c.node, c.ops[0].command) for c in changes] == [  # type: ignore[union-attr]
        ("dgx02", "scontrol update nodename=dgx02 state=resume")]


def test_unreachable_node_is_unknown_and_others_still_planned(ctx: Context) -> None:
    ctx.facts.nodes["dgx04"] = NodeFacts(node="dgx04", reachable=False, error="connection refused")
    ctx.facts.nodes["dgx01"].files.pop("/etc/slurm/gres.conf")
    plan = make_plan(ctx, all_drivers())
    assert plan.unreachable == {"dgx04": "connection refused"}
    assert [(c.driver, c.action) for c in plan.changes if c.node == "dgx04" and c.driver != "node_state"] == [
        ("ssh", "unknown")]
    assert [(c.node, c.action) for c in plan.changing()] == [("dgx01", "create")]


def test_patch_applies_once_and_refuses_when_absent() -> None:
    patch = Patch(name="p", path="/x", nodes="n1", match="ID=debian", replace="ID=ubuntu")
    once = apply_edit("if grep -q ID=debian; then\n", patch)
    assert once == "if grep -q ID=ubuntu; then\n"
    assert apply_edit(once, patch) == once
    with pytest.raises(PatchError, match="does not apply"):
        apply_edit("something else\n", patch)


def test_plan_renders_in_every_format(ctx: Context, tmp_path: Path) -> None:
    from reconciler.engine.report import render_json, render_markdown, render_text

    ctx.state.cluster.partitions[1].max_time = "02:00:00"
    plan = make_plan(ctx, all_drivers())
    assert "+PartitionName=debug Nodes=dgx[01-02] MaxTime=02:00:00" in render_text(plan)
    assert '"verdict": "5 change(s) on 5 node(s)"' in render_json(plan)  # login01 + dgx[01-04]
    md = render_markdown(plan)
    assert md.startswith("<!-- reconciler:plan -->") and "<details>" in md and "scontrol reconfigure" in md
    assert md.count("```diff") == 1 and "#### `dgx[01-04],login01` (5 nodes)" in md  # one diff, folded
    per_node = render_markdown(plan, per_node=True)
    assert per_node.count("```diff") == 5 and "#### `dgx03`" in per_node
    small = render_markdown(plan, limit=1500, per_node=True)
    assert len(small) <= 1500 and "truncated" in small


def test_example_dir_untouched() -> None:
    assert shutil.which("python3")
    assert (EXAMPLE / "cluster.yaml").exists()


def test_controller_release_other_than_slurm_version_is_a_warning(ctx: Context) -> None:
    """Only the controller is asked its version (`slurmctld -V`); another family than cluster.slurm_version
    is a warning naming both, and the plan is otherwise unchanged."""
    from reconciler.engine.gather import build_request

    drivers = all_drivers()
    assert "slurm_version" in build_request(ctx, "login01", drivers).commands
    assert "slurm_version" not in build_request(ctx, "dgx01", drivers).commands
    family = ctx.state.cluster.slurm_version
    ctx.facts.nodes["login01"].slurm_version = f"{family}.4"
    assert make_plan(ctx, drivers).warnings == []
    ctx.facts.nodes["login01"].slurm_version = "20.11.9"
    plan = make_plan(ctx, drivers)
    assert not plan.has_changes
    assert [w for w in plan.warnings if "slurmctld on login01 is 20.11.9" in w and f"is {family} but" in w
            and 'set cluster.slurm_version: "20.11"' in w], plan.warnings
