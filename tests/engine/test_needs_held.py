"""A change that needs a reboot or driver reload is shown and held unless the caller allows it (engine/apply.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from reconciler.engine.apply import Applier, ApplyOptions, held_reason
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import Change, Plan
from reconciler.engine.report import render_markdown, render_text
from tests.ha.local_shell import LocalShell, spec

NODES = ("gpu01", "gpu02")


def _plan(mark: Path | None = None) -> Plan:
    command = f"echo $$ >> {mark}" if mark else "false"
    changes = [Change(node=node, driver="packages", resource="package drv", action="update", phase=60,
                      summary="drv 1 → 2 (needs a reboot)", needs="reboot",
                      ops=[RunCommand(command=command, description="install drv 2")]) for node in NODES]
    return Plan(source="x", changes=changes)


class _Ctx:
    """What the applier reads of a context: nodes, forks, facts (none owed)."""

    def __init__(self, nodes: tuple[str, ...] = NODES) -> None:
        self.state = SimpleNamespace(ssh=SimpleNamespace(forks=4))
        self.specs = {node: spec(node) for node in nodes}
        self.facts = SimpleNamespace(nodes={})
        self.limit = None

    def targets(self) -> list[object]:
        return list(self.specs.values())


def test_plan_text_and_markdown_say_what_is_needed_and_the_flag() -> None:
    text = render_text(_plan())
    assert "Needs a reboot on gpu[01-02]: `apply` holds these changes unless given --allow reboot" in text
    assert "drv 1 → 2 (needs a reboot)" in text
    assert "--allow reboot" in render_markdown(_plan())


def test_held_changes_run_no_command_and_are_reported() -> None:
    lines: list[str] = []
    shell = LocalShell()
    applier = Applier(_Ctx(), shell, ApplyOptions(), log=lines.append)  # type: ignore[arg-type]
    result = applier.run(_plan())
    assert [c.node for c in result.held] == ["gpu01", "gpu02"]
    assert result.applied == [] and result.ok and shell.sent == []  # `false` never ran: nothing failed
    assert any("held, not applied: drv 1 → 2" in line and "--allow reboot" in line for line in lines)
    assert held_reason(result.held[0]) == "needs a reboot: apply with --allow reboot"


def test_allowed_needs_are_applied_and_others_still_held(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    plan = _plan(mark)
    plan.changes[1].needs = "driver-reload"
    options = ApplyOptions(allow=frozenset({"reboot"}))
    result = Applier(_Ctx(), LocalShell(), options, log=lambda _: None).run(plan)  # type: ignore[arg-type]
    assert [c.node for c in result.applied] == ["gpu01"] and [c.node for c in result.held] == ["gpu02"]
    assert len(mark.read_text().split()) == 1  # the reboot-needing one ran, the reload-needing one did not
