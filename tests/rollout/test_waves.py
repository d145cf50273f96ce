"""Wave planning (pure): the canary first, then the steps; cluster-wide changes in one gated wave."""

from __future__ import annotations

import pytest

from reconciler.engine.followups import FollowUp
from reconciler.engine.plan import Change, Plan
from reconciler.model import Rollout
from reconciler.rollout.waves import plan_waves

ORDER = ["ctl"] + [f"gpu{i:02d}" for i in range(1, 17)]
SLURM = ORDER[1:]


def plan_on(nodes: list[str], scope: str = "node", resource: str = "/etc/slurm/prolog.sh") -> Plan:
    """A plan with one changing resource on each node."""
    plan = Plan(source="test")
    plan.changes = [Change(node=n, driver="patches", resource=resource, action="update", scope=scope)  # type: ignore[arg-type]
                    for n in nodes]
    return plan


def sets(rollout: Rollout, plan: Plan) -> list[list[str]]:
    """The node lists of the waves."""
    return [w.nodes for w in plan_waves(plan, rollout, ORDER, SLURM, has_node_checks=True).waves]


def test_default_is_a_canary_then_half_then_the_rest() -> None:
    waves = sets(Rollout(), plan_on(SLURM))
    assert [len(w) for w in waves] == [1, 7, 8]
    assert waves[0] == ["gpu01"] and sum(waves, []) == SLURM  # every node exactly once, inventory order


@pytest.mark.parametrize(("canary", "steps", "sizes"), [
    (2, [4, "100%"], [2, 2, 12]),
    ("25%", ["50%"], [4, 4, 8]),          # the last wave takes every node left
    (1, [1, 3, 16], [1, 2, 13]),          # a step no larger than what is done adds nothing
    (20, ["100%"], [16]),                 # a canary larger than the change is the whole change
])
def test_counts_and_percentages_are_cumulative(canary: int | str, steps: list[int | str], sizes: list[int]) -> None:
    assert [len(w) for w in sets(Rollout(canary=canary, steps=steps), plan_on(SLURM))] == sizes


def test_a_hostlist_canary_takes_those_of_its_nodes_that_change() -> None:
    waves = sets(Rollout(canary="gpu[15-16],gpu40"), plan_on(SLURM[:8] + ["gpu16"]))
    assert waves[0] == ["gpu16"] and "gpu16" not in sum(waves[1:], [])
    only_others = sets(Rollout(canary="gpu[15-16]"), plan_on(["gpu01", "gpu02"]))
    assert only_others[0] == ["gpu01"]  # none of the named canaries change: the first changing node is the canary


def test_slurm_nodes_go_before_the_others() -> None:
    waves = sets(Rollout(canary=1, steps=["100%"]), plan_on(["ctl", "gpu03", "gpu01"]))
    assert waves == [["gpu01"], ["gpu03", "ctl"]]


def test_a_cluster_wide_change_is_one_gated_wave_with_the_slurm_gate() -> None:
    plan = plan_on(SLURM)
    plan.changes.append(Change(node="ctl", driver="slurm_config", resource="/etc/slurm/slurm.conf",
                               action="update", scope="cluster"))
    planned = plan_waves(plan, Rollout(), ORDER, SLURM, has_node_checks=True)
    assert len(planned.waves) == 1 and planned.waves[0].cluster and planned.waves[0].gated
    assert planned.waves[0].nodes[0] == "gpu01" and set(planned.waves[0].nodes) == set(ORDER)
    assert planned.gates == ["slurm", "node-checks", "smoke-job"] and "slurm.conf" in planned.waves[0].why


def test_all_and_bootstrap_are_one_ungated_wave() -> None:
    all_at_once = plan_waves(plan_on(SLURM), Rollout(waves="all"), ORDER, SLURM)
    assert [(len(w.nodes), w.gated) for w in all_at_once.waves] == [(16, False)] and all_at_once.gates == []
    bootstrap = plan_waves(plan_on(SLURM), Rollout(), ORDER, SLURM, bootstrap="bootstrap: Slurm does not answer")
    assert [(len(w.nodes), w.gated) for w in bootstrap.waves] == [(16, False)]
    assert bootstrap.mode == "bootstrap"


def test_gates_follow_the_rollout_settings() -> None:
    rollout = Rollout.model_validate({"gates": {"smoke_job": False, "nccl": True}})
    assert plan_waves(plan_on(SLURM), rollout, ORDER, SLURM, has_node_checks=False).gates == ["nccl"]


def test_follow_ups_alone_put_a_node_in_a_wave_and_no_change_no_wave() -> None:
    plan = Plan(source="test")
    assert plan_waves(plan, Rollout(), ORDER, SLURM).waves == []
    plan.followups = [FollowUp(node="gpu05", kind="restart", target="slurmd", phase=30)]
    assert sets(Rollout(), plan) == [["gpu05"]]


def test_lines_show_each_wave_folded() -> None:
    lines = plan_waves(plan_on(SLURM), Rollout(), ORDER, SLURM, has_node_checks=True).lines()
    assert lines[0].startswith("wave 1/3 canary: gpu01 [1 node(s)]; then node-checks, smoke-job")
    assert "gpu[09-16] [8 node(s)]" in lines[2]


def test_lead_changes_go_first_alone_then_the_rest_in_waves() -> None:
    """A Slurm upgrade: the controller's transaction leads in a gated wave of its own; the slurmd nodes follow in
    the canary and steps; with Slurm not answering (an interrupted upgrade), the lead is ungated, the rest gated."""
    plan = plan_on(SLURM[:4])
    plan.changes.append(Change(node="ctl", driver="packages", resource="packages", action="update", scope="lead"))
    planned = plan_waves(plan, Rollout(canary=1, steps=["100%"]), ORDER, SLURM, has_node_checks=True)
    assert [(w.name, w.nodes, w.gated) for w in planned.waves] == [
        ("lead", ["ctl"], True), ("canary", ["gpu01"], True), ("step 2", ["gpu02", "gpu03", "gpu04"], True)]
    assert "goes first: packages" in planned.waves[0].why
    resumed = plan_waves(plan, Rollout(canary=1, steps=["100%"]), ORDER, SLURM, has_node_checks=True,
                         bootstrap="bootstrap: Slurm does not answer")
    assert [(w.name, w.gated) for w in resumed.waves] == [("lead", False), ("canary", True), ("step 2", True)]
    alone = plan_on([])
    alone.changes.append(Change(node="ctl", driver="packages", resource="packages", action="update", scope="lead"))
    assert [(w.name, w.nodes) for w in plan_waves(alone, Rollout(), ORDER, SLURM).waves] == [("lead", ["ctl"])]
