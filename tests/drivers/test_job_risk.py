"""A node's CPUs changing while jobs run on it: the plan says which jobs the controller step would end, and the
controller step drains and empties the nodes first (FollowUp.protect).

Observed on real daemons (tests/params/test_job_kill_steps_testbed.py): such a job is ended at the slurmctld
restart (22.05, 24.11) or `scontrol reconfigure` (24.11), not at the node's slurmd restart. Planned on synthetic
facts of a converged 8-node cluster (no SSH: the planner only reads facts).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.scale import write_state
from reconciler.desired.loader import load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.converged import converged_facts
from reconciler.drivers.job_risk import cpu_keys_changed
from reconciler.drivers.step_order import ORDER_CONTROLLER
from reconciler.engine.context import Context
from reconciler.engine.followups import ORDER_SERVICE, FollowUp
from reconciler.engine.plan import Plan
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_markdown, render_text
from reconciler.facts.models import JobFact
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_planning import PrPlan

# bench's state: 8 GPU nodes in 4 node sets of 2 (gpu[00001-00002] first), controller login01, CPUs=224
JOBS = [JobFact(job_id="41", state="RUNNING", nodes=["gpu00001"]),
        JobFact(job_id="42", state="RUNNING", nodes=["gpu00001", "gpu00003"]),
        JobFact(job_id="43", state="RUNNING", nodes=["gpu00003"])]


def planned(tmp_path: Path, family: str, edit: str, jobs: list[JobFact]) -> Plan:
    """Plan a converged cluster of FAMILY after EDIT (cpus, sockets, memory) of the first node set, with JOBS."""
    tmp_path.mkdir(exist_ok=True)
    write_state(tmp_path, 8)
    loaded = load_dir(tmp_path)
    state = loaded.state.model_copy(deep=True)
    state.cluster.slurm_version = family
    ctx = Context(loaded=dataclasses.replace(loaded, state=state), source="t @ 0123456789ab")
    ctx.facts = converged_facts(ctx)
    ctx.facts.jobs = jobs
    first = state.cluster.node_sets[0]
    if edit == "cpus":
        first.cpus = 112
    elif edit == "sockets":
        first.sockets, first.cores_per_socket = 1, 112
    else:
        first.real_memory = 1_000_000
    return make_plan(ctx, all_drivers())


def kills(plan: Plan) -> list[str]:
    """The plan's warnings about killed jobs (bench's state carries a risk warning of its own)."""
    return [w for w in plan.warnings if " would end " in w]


def controller_step(plan: Plan) -> FollowUp:
    """The controller's slurmctld restart or reconfigure (a reconfigure after a restart aside)."""
    steps = [f for f in plan.followups if f.node == "login01" and ORDER_CONTROLLER <= f.order < ORDER_SERVICE]
    assert steps, plan.followups
    return steps[0]


@pytest.mark.parametrize(("family", "step"), [("22.05", "the slurmctld restart"), ("24.11", "`scontrol reconfigure`")])
def test_changing_a_busy_nodes_cpus_drains_and_empties_it_before_the_controller_step(tmp_path: Path, family: str,
                                                                                      step: str) -> None:
    plan = planned(tmp_path, family, "cpus", JOBS)
    warning = (f"gpu00001: changing CPUs while jobs 41, 42 run there: {step} would end them (requeued to run again "
               "from the start, or NODE_FAIL where it cannot be requeued; observed on 22.05 and 24.11: "
               "tests/params/test_job_kill_steps_testbed.py); apply first drains gpu00001 and waits (at most "
               f"--drain-timeout) until they end, then runs {step} and resumes gpu00001")
    assert kills(plan) == [warning]  # gpu00003's definition does not change: its jobs are not named
    reason = f"{step} would end running jobs 41, 42 on gpu00001 (CPUs changed): gpu00001 is drained and emptied first"
    controller = controller_step(plan)
    assert reason in controller.reasons
    # both nodes of the set change: both drained around the step (the idle one too: a job could start there)
    assert sorted(controller.protect) == ["gpu00001", "gpu00002"]
    assert "rolling restart of slurmd" in controller.protect["gpu00001"].drain  # the reason node_state resumes
    text = render_text(plan)  # what `plan` prints, and `apply` before it asks
    assert f"warning: {warning}" in text
    assert f"    ({reason})" in text
    assert "first drains gpu[00001-00002] and waits (at most --drain-timeout)" in text
    assert f"- {warning}" in render_markdown(plan)
    comment = render_pr_comment(PrPlan(number=1, head_sha="c" * 40, head_ref="cpus", subdir="desired-state",
                                       status="ok", main_plan=Plan(source="s"), plan=plan))
    assert "would end them" in comment and reason in comment
    # the node's own slurmd restart stays drained (a hardware definition change, not slurmd-only)
    assert any(f.node == "gpu00001" and f.target == "slurmd" and f.drain for f in plan.followups)


def test_sockets_count_as_cpus_and_an_idle_node_or_memory_change_warns_nothing(tmp_path: Path) -> None:
    sockets = planned(tmp_path / "s", "24.11", "sockets", JOBS)
    assert len(kills(sockets)) == 1 and "changing Sockets, CoresPerSocket while" in kills(sockets)[0]
    idle = planned(tmp_path / "i", "24.11", "cpus", [JobFact(job_id="43", state="RUNNING", nodes=["gpu00003"])])
    assert kills(idle) == [] and not any("would end" in r for r in controller_step(idle).reasons)
    assert sorted(controller_step(idle).protect) == ["gpu00001", "gpu00002"]  # idle now, maybe not at apply
    memory = planned(tmp_path / "m", "22.05", "memory", JOBS)
    assert kills(memory) == [] and not any(f.protect for f in memory.followups)


def test_cpu_keys_are_compared_case_insensitively_and_procs_is_cpus() -> None:
    before = "NodeName=a CPUs=8 RealMemory=1\nNodeName=b cpus=8\n"
    after = "NodeName=a cpus=8 RealMemory=2\nNodeName=b Procs=16\n"
    assert cpu_keys_changed(before, after) == {"b": ["cpus", "procs"]}
