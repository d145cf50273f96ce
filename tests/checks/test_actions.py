"""Drains and resumes decided by check results: only check-owned drains are ever resumed."""

from __future__ import annotations

from reconciler.checks.actions import REASON_MAX, Action, Policy, apply_actions, drain_reason, owns, plan_actions
from reconciler.checks.results import CheckResult
from reconciler.checks.slurm_view import parse_view
from reconciler.desired.inventory import NodeSpec
from reconciler.drivers.node_state import CHECK_PREFIXES
from reconciler.model import ServiceManager
from reconciler.transport.base import BaseTransport, CommandResult

NCCL_REASON = "reconciler: nccl nightly: all_reduce busbw 118.6 < 330 GB/s"
SCONTROL = f"""\
NodeName=gpu01 State=IDLE Partitions=debug
NodeName=gpu02 State=IDLE+DRAIN Partitions=debug Reason={NCCL_REASON} [root@2026-11-21T02:20:01]
NodeName=gpu03 State=IDLE+DRAIN Partitions=debug Reason=maintenance [root@2026-11-21T02:20:01]
NodeName=gpu04 State=IDLE+DRAIN Partitions=debug Reason=reconciler: rolling restart of slurmd [root@2026-11-21T02:20:01]
NodeName=gpu05 State=IDLE+DRAIN Partitions=debug Reason=reconciler: check basics: mount /shared: not mounted [root@2026-11-21T02:20:01]
NodeName=gpu06 State=IDLE+DRAIN Partitions=debug Reason=reconciler: nccl nightly2: all_reduce busbw 1 < 330 GB/s [root@2026-11-21T02:20:01]
"""
POLICIES = {("nccl", "nightly"): Policy(), ("node", "basics"): Policy(), ("nccl", "nightly2"): Policy()}


def view():  # type: ignore[no-untyped-def]
    return parse_view(f"@@reconciler-begin nodes\n{SCONTROL}@@reconciler-end nodes 0\n"
                      "@@reconciler-begin jobs\n@@reconciler-end jobs 0\n")


def result(node: str, ok: bool, check: str = "nightly", kind: str = "nccl", **kw: object) -> CheckResult:
    message = "nccl all_reduce busbw 118.6 < 330 GB/s" if kind == "nccl" and not ok else "fine"
    if kind == "node" and not ok:
        message = "mount /shared: not mounted"
    return CheckResult(check=check, kind=kind, node=node, ok=ok, message=message, **kw)  # type: ignore[arg-type]


def decided(actions: list[Action]) -> list[tuple[str, str, str | None]]:
    return [(a.node, a.kind, a.reason) for a in actions]


def test_reasons_are_short_owned_and_recognised_by_the_node_state_driver() -> None:
    assert drain_reason(result("gpu01", False)) == NCCL_REASON
    node = result("gpu01", False, check="basics", kind="node")
    assert drain_reason(node) == "reconciler: check basics: mount /shared: not mounted"
    assert drain_reason(node).startswith(CHECK_PREFIXES) and drain_reason(result("x", False)).startswith(CHECK_PREFIXES)
    long = CheckResult(check="basics", kind="node", node="gpu01", ok=False, message="x=1; " + "y" * 300)
    reason = drain_reason(long)
    assert len(reason) == REASON_MAX and reason.endswith("...") and "=" not in reason
    assert owns("nccl", "nightly", NCCL_REASON)
    assert not owns("nccl", "nightly2", NCCL_REASON) and not owns("nccl", "nightly", "reconciler: nccl nightly2: x")


def test_failing_idle_node_is_drained_passing_owned_drain_is_resumed() -> None:
    actions = plan_actions([result("gpu01", False), result("gpu02", True)], view(), POLICIES)
    assert decided(actions) == [("gpu01", "drain", NCCL_REASON), ("gpu02", "resume", None)]
    assert actions[0].command == f"scontrol update nodename=gpu01 state=drain reason='{NCCL_REASON}'"
    assert actions[1].command == "scontrol update nodename=gpu02 state=resume"


def test_drains_of_humans_nhc_other_reasons_and_other_checks_are_never_resumed() -> None:
    results = [result(n, True) for n in ("gpu03", "gpu04", "gpu05", "gpu06")]
    assert plan_actions(results, view(), POLICIES) == []


def test_a_failure_on_a_node_drained_by_someone_else_keeps_their_reason() -> None:
    [action] = plan_actions([result("gpu03", False)], view(), POLICIES)
    assert (action.kind, action.command, action.note) == ("keep", None, "already drained: maintenance")


def test_resume_is_handed_over_while_another_check_still_fails() -> None:
    others = [result("gpu02", False, check="basics", kind="node")]  # e.g. store.latest()
    [action] = plan_actions([result("gpu02", True)], view(), POLICIES, others)
    assert (action.kind, action.reason) == ("drain", "reconciler: check basics: mount /shared: not mounted")
    assert action.note == "nightly passed, but basics still fails"
    # once basics passes too (its newer result in this run wins over the stored one), the node is resumed
    [action] = plan_actions([result("gpu05", True, check="basics", kind="node")], view(), POLICIES,
                            [result("gpu05", False, check="basics", kind="node")])
    assert action.kind == "resume"


def test_no_drain_without_drain_on_fail_errors_and_skips_never_act() -> None:
    policies = {("nccl", "nightly"): Policy(drain_on_fail=False)}
    assert plan_actions([result("gpu01", False)], view(), policies) == []
    error = CheckResult(check="nightly", kind="nccl", node="gpu01", ok=False, error=True, message="not run: busy")
    skip = CheckResult(check="nightly", kind="nccl", node="gpu02", ok=True, skipped=True, message="skipped")
    assert plan_actions([error, skip], view(), POLICIES) == []


def test_nodes_unknown_to_slurm_are_left_alone() -> None:
    assert plan_actions([result("ctl", False)], view(), POLICIES) == []


def test_a_check_failing_on_too_many_nodes_drains_none() -> None:
    scontrol = "".join(f"NodeName=n{i} State=IDLE Partitions=debug\n" for i in range(4))
    v = parse_view(f"@@reconciler-begin nodes\n{scontrol}@@reconciler-end nodes 0\n"
                   "@@reconciler-begin jobs\n@@reconciler-end jobs 0\n")
    results = [result(f"n{i}", i == 3) for i in range(4)]  # 3 of 4 fail
    actions = plan_actions(results, v, {("nccl", "nightly"): Policy(max_drains=2)})
    assert [a.kind for a in actions] == ["refused"] * 3
    assert actions[0].note == "3 nodes failed nightly, more than 2: check the check"
    assert all(a.command is None for a in actions)
    assert [a.kind for a in plan_actions(results[1:], v, {("nccl", "nightly"): Policy(max_drains=2)})] == ["drain"] * 2


class Recorder(BaseTransport):
    """Answers every command with exit 0 (or 1 for resumes) and remembers it."""

    def __init__(self) -> None:
        super().__init__(1)
        self.commands: list[str] = []

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        self.commands.append(command)
        rc = 1 if "resume" in command else 0
        return CommandResult(node.name, rc, "", "slurm_update error: Invalid node state specified" if rc else "", 0.01)


def test_apply_runs_scontrol_on_the_controller_and_updates_the_view() -> None:
    ctl = NodeSpec("ctl", "ctl", 22, "root", None, None, frozenset({"controller"}), ServiceManager(), None)
    v = view()
    actions = plan_actions([result("gpu01", False), result("gpu02", True), result("gpu03", False)], v, POLICIES)
    transport = Recorder()
    lines: list[str] = []
    apply_actions(transport, ctl, actions, v, lines.append)
    assert transport.commands == [f"scontrol update nodename=gpu01 state=drain reason='{NCCL_REASON}'",
                                  "scontrol update nodename=gpu02 state=resume"]
    assert actions[0].done and v.nodes["gpu01"].drained and v.nodes["gpu01"].reason == NCCL_REASON
    assert not actions[1].done and "Invalid node state" in (actions[1].error or "")
    assert v.nodes["gpu02"].drained  # the failed resume left it drained
    assert lines[1] == "resume gpu02 - nightly passed: FAILED ctl: exit 1: slurm_update error: Invalid node state specified"
    assert lines[2] == "keep gpu03 - already drained: maintenance"


def test_a_passing_check_leaves_a_pending_reboots_drain_alone() -> None:
    """24.11: an admin's `scontrol reboot ASAP` on a node still carrying this check's old reason drains it with
    NextState=UNDRAIN; the passing check keeps it (a resume would cancel the reboot), where it resumes it otherwise."""
    pending = SCONTROL.replace("NodeName=gpu02 State=IDLE+DRAIN ", "NodeName=gpu02 State=IDLE+DRAIN+REBOOT_REQUESTED "
                               "NextState=UNDRAIN ")
    waiting = parse_view(f"@@reconciler-begin nodes\n{pending}@@reconciler-end nodes 0\n"
                         "@@reconciler-begin jobs\n@@reconciler-end jobs 0\n")
    kept = plan_actions([result("gpu02", True)], waiting, POLICIES)
    assert [(a.node, a.kind) for a in kept] == [("gpu02", "keep")] and "pending reboot" in (kept[0].note or "")
    assert [(a.node, a.kind) for a in plan_actions([result("gpu02", True)], view(), POLICIES)] == [("gpu02", "resume")]
