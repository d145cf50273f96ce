"""Follow-ups owed on a node (reconciler/engine/owed.py, owed_ledger.py): a plan carries what an earlier apply
left undone, a node's marker names only its own shell, and the ledger's node-side script (run for real, on this
host, in a temporary directory: a stand-in for SSH only) writes, keeps and removes the marker."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path

import pytest

from bench.scale import write_state
from reconciler.desired.inventory import NodeSpec
from reconciler.desired.loader import load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.converged import converged_facts, file_fact
from reconciler.drivers.slurm_config import RECONFIGURE, drain_steps, responding_command
from reconciler.drivers.step_order import ORDER_COMPUTE, ORDER_CONTROLLER
from reconciler.engine import owed_ledger
from reconciler.engine.context import Context
from reconciler.engine.followups import FollowUp, command, service
from reconciler.engine.owed import OWED_PATH, OwedFile, OwedStep, keeper
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_text
from reconciler.facts.models import FileFact
from reconciler.transport.base import CommandResult


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    """Four GPU nodes and their controller, converged."""
    write_state(tmp_path, 4)
    loaded = load_dir(tmp_path)
    context = Context(loaded=dataclasses.replace(loaded, state=loaded.state.model_copy(deep=True)), source="t")
    context.facts = converged_facts(context)
    return context


def reconfigure(ctl: str) -> FollowUp:
    return command(ctl, RECONFIGURE, 30, "slurm.conf changed", order=ORDER_CONTROLLER)


def slurmd_restart(ctl: str, node: str) -> FollowUp:
    return service(node, "restart", "slurmd", 30, f"gres.conf changed on {node}", order=ORDER_COMPUTE, rolling=True,
                   drain=drain_steps(ctl, node), ready=responding_command(node), ready_on=ctl)


def marker(*steps: FollowUp, error: str = "scontrol reconfigure: Zero Bytes were transmitted") -> FileFact:
    owed = [OwedStep(step=s, since="2024-05-01T10:00:00Z", by="alice@login1", error=error) for s in steps]
    return file_fact(OwedFile(owed=owed).model_dump_json(), mode="0600")


def test_a_converged_cluster_with_a_failed_reconfigure_owed_plans_it_again(ctx: Context) -> None:
    ctl = ctx.controller
    assert not make_plan(ctx, all_drivers()).has_changes
    ctx.facts.nodes[ctl].files[OWED_PATH] = marker(reconfigure(ctl))
    plan = make_plan(ctx, all_drivers())
    assert plan.has_changes and not plan.changing() and not plan.errors
    assert [(f.node, f.kind, f.target) for f in plan.followups] == [(ctl, "command", RECONFIGURE)]
    text = render_text(plan)
    assert f"runs `{RECONFIGURE}` on {ctl}" in text
    assert ("owed since 2024-05-01T10:00:00Z: the apply by alice@login1 did not finish it: scontrol reconfigure: "
            "Zero Bytes were transmitted") in text
    assert "no changes; 1 follow-up step(s) to run" in text


def test_an_owed_step_the_new_plan_also_asks_for_runs_once(ctx: Context) -> None:
    ctl = ctx.controller
    ctx.facts.nodes[ctl].files[OWED_PATH] = marker(reconfigure(ctl))
    ctx.state.cluster.partitions[0].max_time = "3-00:00:00"  # a slurm.conf change: the plan asks for it too
    plan = make_plan(ctx, all_drivers())
    steps = [f for f in plan.followups if f.target == RECONFIGURE]
    assert len(steps) == 1 and steps[0].reasons[0] == "slurm.conf changed"
    assert steps[0].reasons[-1].startswith("owed since ")


def test_owed_steps_outside_the_limit_or_on_an_unreached_node_wait(ctx: Context) -> None:
    ctl, gpu = ctx.controller, sorted(n for n in ctx.facts.nodes if n != ctx.controller)[0]
    ctx.facts.nodes[ctl].files[OWED_PATH] = marker(reconfigure(ctl), slurmd_restart(ctl, gpu))
    ctx.limit = {gpu}  # the restart is gpu's (drained from ctl, as a planned one would be); the reconfigure is not
    assert [f.target for f in make_plan(ctx, all_drivers()).followups] == ["slurmd"]
    ctx.limit = None
    ctx.facts.nodes[gpu].reachable = False
    assert [f.target for f in make_plan(ctx, all_drivers()).followups] == [RECONFIGURE]


def test_steps_are_kept_by_their_node_unless_they_use_another_nodes_shell(ctx: Context) -> None:
    ctl, gpu = ctx.controller, sorted(n for n in ctx.facts.nodes if n != ctx.controller)[0]
    assert keeper(ctx, command(gpu, "sysctl --system", 20, "sysctl")) == gpu
    assert keeper(ctx, slurmd_restart(ctl, gpu)) == ctl  # drains and checks on the controller


def test_a_compute_nodes_marker_cannot_run_a_command_on_the_controller(ctx: Context) -> None:
    """A hostile (or confused) compute node's marker is refused: nothing in it runs, the plan says why."""
    ctl, gpu = ctx.controller, sorted(n for n in ctx.facts.nodes if n != ctx.controller)[0]
    hostile = command(gpu, "true", 30, "x", run_on=ctl)
    ctx.facts.nodes[gpu].files[OWED_PATH] = marker(command(gpu, "sysctl --system", 20, "sysctl"), hostile)
    plan = make_plan(ctx, all_drivers())
    assert plan.followups == []
    assert plan.errors == [f"{gpu}: {gpu}:{OWED_PATH}: owed.1.step: names {ctl}; a node's marker may only name "
                           "itself: the steps it holds are not run; remove the file once they are done by hand"]


def test_a_compute_nodes_marker_cannot_have_the_controller_drain_through_protect(ctx: Context) -> None:
    """`protect` runs its drain commands on the controller: a compute node's marker naming it is refused too."""
    ctl, gpu = ctx.controller, sorted(n for n in ctx.facts.nodes if n != ctx.controller)[0]
    hostile = command(gpu, "true", 30, "x")
    hostile.protect = {gpu: drain_steps(ctl, gpu)}
    ctx.facts.nodes[gpu].files[OWED_PATH] = marker(hostile)
    plan = make_plan(ctx, all_drivers())
    assert plan.followups == [] and f"names {ctl}" in " ".join(plan.errors)


@pytest.mark.parametrize(("content", "says"), [
    ('{"owed": [\n  {"step": ', f"{OWED_PATH}:2: not JSON (Expecting value)"),
    ('{"owed": [{"step": {"node": "x"}, "since": "t", "by": "b"}]}', f"{OWED_PATH}: owed.0.step.kind: Field required"),
])
def test_an_unreadable_marker_is_an_error_naming_the_file_and_the_place(ctx: Context, content: str, says: str) -> None:
    ctl = ctx.controller
    ctx.facts.nodes[ctl].files[OWED_PATH] = file_fact(content)
    plan = make_plan(ctx, all_drivers())
    assert len(plan.errors) == 1 and f"{ctl}:{says}" in plan.errors[0], plan.errors
    assert plan.followups == []


class LocalShell:
    """Runs each command with this host's shell: a stand-in for SSH (the node-side script runs for real)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def run_many(self, nodes: list[NodeSpec], cmd: str, *, stdin: object = None,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        out = {}
        for spec in nodes:
            text = stdin(spec) if callable(stdin) else stdin
            self.sent.append((spec.name, json.loads(text or "{}")))
            started = time.monotonic()
            done = subprocess.run(["bash", "-c", cmd], input=text, capture_output=True, text=True, timeout=60)
            out[spec.name] = CommandResult(spec.name, done.returncode, done.stdout, done.stderr,
                                           time.monotonic() - started)
        return out


def test_the_ledger_records_first_keeps_what_failed_and_removes_the_marker_when_done(
        ctx: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, gpu = ctx.controller, sorted(n for n in ctx.facts.nodes if n != ctx.controller)[0]
    path = tmp_path / "node" / "followups-owed.json"
    monkeypatch.setattr(owed_ledger, "OWED_PATH", str(path))  # this host is every node: one file stands for each
    shell, lines = LocalShell(), []
    steps = [reconfigure(ctl), slurmd_restart(ctl, gpu)]
    ledger = owed_ledger.OwedLedger(ctx, shell, steps, None, lines.append)  # type: ignore[arg-type]
    ledger.record()
    kept = OwedFile.model_validate_json(path.read_text())
    assert [(i.step.node, i.step.target, i.error) for i in kept.owed] == [(ctl, RECONFIGURE, None), (gpu, "slurmd", None)]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    said = ledger.settle({steps[1].key}, {ctl: ["scontrol reconfigure: Zero Bytes were transmitted"]}, None)
    kept = OwedFile.model_validate_json(path.read_text())
    assert [(i.step.target, i.error) for i in kept.owed] == [(RECONFIGURE, "scontrol reconfigure: Zero Bytes were "
                                                                           "transmitted")]
    assert said == [f"{ctl}: run `{RECONFIGURE}` is owed: the next plan shows it and the next apply runs it "
                    f"(kept in {ctl}:{owed_ledger.OWED_PATH})"]
    since = kept.owed[0].since

    ctx.facts.nodes[ctl].files[OWED_PATH] = file_fact(path.read_text())  # the next apply's facts
    plan = make_plan(ctx, all_drivers())
    again = owed_ledger.OwedLedger(ctx, shell, plan.followups, None, lines.append)  # type: ignore[arg-type]
    again.record()
    assert OwedFile.model_validate_json(path.read_text()).owed[0].since == since  # owed since the first time
    assert again.settle({plan.followups[0].key}, {}, None) == []
    assert not path.exists() and lines == []
    assert [sent["owed"] is None for _, sent in shell.sent] == [False, False, False, True]
