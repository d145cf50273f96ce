"""The plan's words for reboots (text and the PR comment's Markdown): how many nodes reboot, how many wait for
running jobs (Slurm's view: ALLOCATED/MIXED/COMPLETING), the versions; from the recorded testbed stand-in facts."""

from __future__ import annotations

from pathlib import Path

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.drivers.packages import PackagesDriver
from reconciler.drivers.slurm_upgrade import SlurmUpgradeDriver
from reconciler.drivers.slurm_workload import SlurmWorkload
from reconciler.engine.context import Context
from reconciler.engine.plan import Plan
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_markdown, render_text
from reconciler.facts import packages as pkgfacts
from reconciler.facts.models import ClusterFacts, NodeFacts, SlurmNodeFact
from reconciler.rollout.preview import annotate
from tests.drivers.base_state import write_state
from tests.drivers.packages.test_packages_lockstep import PAIR, answer, pair_yaml

CLUSTER = """\
cluster:
  name: t
  slurm_version: "22.05"
  controllers: [ctl]
  slurm_conf: {GresTypes: gpu}
  node_sets:
    - {nodes: "gpu[01-08]", CPUs: 2}
  partitions:
    - {name: debug, nodes: "gpu[01-08]", default: true}
"""
NODES = 'nodes:\n  - {name: ctl, roles: [controller]}\n  - {name: "gpu[01-08]", roles: [compute]}\n'
UPGRADE = "nvidia-driver-standin 550.127.05-1 → 570.86.15-1, nvidia-fabricmanager-standin 550.127.05-1 → 570.86.15-1"


def plan_8(tmp_path: Path, busy: dict[str, str], needs: str = "reboot", rollout: str | None = None) -> Plan:
    """The stand-in pair 550 -> 570 on gpu[01-08] (needs NEEDS), Slurm showing BUSY node states; with ROLLOUT
    (rollout.yaml), the plan annotated with its waves as `reconciler plan` does."""
    root = write_state(tmp_path / "repo", pair_yaml("570.86.15-1").replace("gpu[01-02]", "gpu[01-08]")
                       .replace("needs: reboot", f"needs: {needs}"))
    (root / "cluster.yaml").write_text(CLUSTER)
    (root / "nodes.yaml").write_text(NODES)
    if rollout is not None:
        (root / "rollout.yaml").write_text(rollout)
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = ClusterFacts(controller=ctx.controller)
    packages = PackagesDriver()
    for name in node_specs(ctx.state):
        ctx.facts.nodes[name] = NodeFacts(node=name, reachable=True)
        ctx.facts.slurm_nodes[name] = SlurmNodeFact(name=name, state=busy.get(name, "IDLE"))
        packages.absorb(ctx, ctx.facts, name, ctx.facts.nodes[name], {pkgfacts.FACTS_KEY: answer(" ".join(PAIR))})
    plan = make_plan(ctx, [packages, SlurmUpgradeDriver()])
    if rollout is not None:
        annotate(ctx, plan, SlurmWorkload())
    return plan


def test_reboots_8_nodes_2_wait_for_running_jobs(tmp_path: Path) -> None:
    """Jobs on gpu01 (ALLOCATED) and gpu02 (MIXED), gpu03 drained idle: text and Markdown say it, with versions."""
    plan = plan_8(tmp_path, {"gpu01": "ALLOCATED", "gpu02": "MIXED", "gpu03": "IDLE+DRAIN"})
    line = f"reboots 8 nodes; 2 wait for running jobs (gpu[01-02]): {UPGRADE}"
    text = render_text(plan)
    assert line in text, text
    assert "Needs a reboot on gpu[01-08]: `apply` holds these changes unless given --allow reboot" in text
    markdown = render_markdown(plan)
    assert f"- {line}" in markdown, markdown


def test_no_running_jobs_no_waiting_words(tmp_path: Path) -> None:
    """Every node idle: the count and versions, no `wait for running jobs`."""
    text = render_text(plan_8(tmp_path, {}))
    assert f"reboots 8 nodes: {UPGRADE}" in text and "running jobs" not in text, text


def test_driver_reload_words(tmp_path: Path) -> None:
    """A change needing a driver reload: `reloads the driver on`, one node waiting (singular)."""
    text = render_text(plan_8(tmp_path, {"gpu05": "COMPLETING"}, needs="driver-reload"))
    assert "reloads the driver on 8 nodes; 1 waits for running jobs (gpu05): nvidia-driver-standin" in text, text


ORCHESTRATED = "rollout:\n  upgrade:\n    max_unavailable: 2\n    gates: [gpu, smoke]\n"


def test_orchestrated_upgrade_is_not_called_held(tmp_path: Path) -> None:
    """With rollout.upgrade the reboots go node by node: the plan says how, never that `apply` holds them."""
    plan = plan_8(tmp_path, {"gpu01": "ALLOCATED"}, rollout=ORCHESTRATED)
    text, markdown = render_text(plan), render_markdown(plan)
    words = ("Upgrades with reboots on gpu[01-08]: node by node, 2 at a time now (max_unavailable 2 of 8 = 2, none "
             "unavailable now), gated by gpu, smoke (rollout.upgrade)")
    assert words in text, text
    assert f"- {words}" in markdown, markdown
    assert f"reboots 8 nodes; 1 waits for running jobs (gpu01): {UPGRADE}" in text, text
    for shown in (text, markdown):
        assert "holds these changes" not in shown and "--allow" not in shown, shown


def test_orchestrated_driver_reload_without_gates(tmp_path: Path) -> None:
    """A driver reload under rollout.upgrade with no gates: says so."""
    plan = plan_8(tmp_path, {}, needs="driver-reload",
                  rollout="rollout:\n  upgrade: {gates: [], driver_reload: {modules: [nvidia]}}\n")
    text = render_text(plan)
    assert ("Upgrades with driver reloads on gpu[01-08]: node by node, 1 at a time now (max_unavailable 1 of 8 = 1, "
            "none unavailable now), no gates (rollout.upgrade)" in text), text
    assert "--allow" not in text, text


def test_without_rollout_upgrade_still_held(tmp_path: Path) -> None:
    """Annotated with waves but no rollout.upgrade: today's words, `apply` holds them unless --allow."""
    text = render_text(plan_8(tmp_path, {}, rollout="rollout:\n  canary: 1\n"))
    assert "Needs a reboot on gpu[01-08]: `apply` holds these changes unless given --allow reboot" in text, text
    assert "rollout.upgrade" not in text, text


def test_the_plan_says_how_many_can_go_now_counting_nodes_a_human_drained(tmp_path: Path) -> None:
    """Issue 46 item 2: 2 of 8 drained by a human (one DOWN too) and max_unavailable 50%: 2 more at once, and why."""
    plan = plan_8(tmp_path, {"gpu01": "IDLE+DRAIN", "gpu02": "DOWN+DRAIN"},
                  rollout="rollout:\n  upgrade:\n    max_unavailable: 50%\n    gates: [gpu]\n")
    text = render_text(plan)
    assert ("node by node, 2 at a time now (max_unavailable 50% of 8 = 4, 2 unavailable already: gpu01 IDLE+DRAIN, "
            "gpu02 DOWN+DRAIN), gated by gpu (rollout.upgrade)") in text, text


def test_the_plan_says_a_partition_at_its_minimum_holds_more_back(tmp_path: Path) -> None:
    """min_available 75% of an 8-node partition with one node drained: one more may go, the partition says why."""
    plan = plan_8(tmp_path, {"gpu03": "IDLE+DRAIN"}, rollout=(
        "rollout:\n  upgrade:\n    max_unavailable: 4\n    min_available: {debug: 75%}\n    gates: [gpu]\n"))
    text = render_text(plan)
    assert ("1 at a time now (max_unavailable 4 of 8 = 4, 1 unavailable already: gpu03 IDLE+DRAIN; partition debug: "
            "min_available 75% of 8 = 6; taking gpu02 would leave 5 available)") in text, text


def test_the_plan_says_a_busy_node_is_reserved_and_which_partitions_are_requeued(tmp_path: Path) -> None:
    plan = plan_8(tmp_path, {"gpu01": "MIXED"}, rollout=(
        "rollout:\n  upgrade: {mode: reservation, requeue: [debug], gates: [gpu]}\n"))
    assert ("gated by gpu; a busy node is reserved from when its jobs are expected to end (mode reservation), its "
            "free GPUs taking jobs until then; jobs of partition debug are requeued, not waited for "
            "(rollout.upgrade)") in render_text(plan)
    drain = render_text(plan_8(tmp_path / "drain", {"gpu01": "MIXED"}, rollout="rollout:\n  upgrade: {gates: [gpu]}\n"))
    assert "gated by gpu (rollout.upgrade)" in drain and "reserved" not in drain and "requeued" not in drain
