"""A compromised node returning hostile facts (issue 22): bounded, escaped, never executed.

1. Any answer text from a node (random bytes as its JSON, random text as its scheduler output): parse_node_facts
   and the drivers' absorb return typed facts or mark the node unreadable; nothing raises.
2. Hostile text inside facts (a managed file's content on the node, a drain reason, a service name) never reaches
   a command the plan would run: only the desired state's values do. It reaches the PR comment inside a code
   fence or escaped, never as live Markdown or HTML.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.desired.loader import load_dir
from reconciler.drivers import all_drivers
from reconciler.engine.context import Context
from reconciler.engine.gather import parse_node_facts
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.planner import make_plan
from reconciler.facts.models import FileFact, SlurmNodeFact
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_planning import PrPlan
from reconciler.transport.base import CommandResult
from tests.drivers.operations.test_operations import converged_facts

REPO = Path(__file__).resolve().parents[3]
MARK = "PWNED"
HOSTILE = [f"$(touch /tmp/{MARK})", f"`touch /tmp/{MARK}`", f"; touch /tmp/{MARK} #", f"<script>{MARK}</script>",
           f"```\n[{MARK}](http://x)\n```", f"\x1b]0;{MARK}\x07", f"{MARK}\u202e\u2028", f"' || {MARK} '"]


@pytest.fixture(scope="module")
def ctx() -> Context:
    """The example cluster, converged."""
    context = Context(loaded=load_dir(REPO / "desired-state"), source="test")
    context.facts = converged_facts(context)
    return context


@given(st.binary(max_size=400))
def test_any_answer_bytes_give_facts_or_an_unreadable_node(ctx: Context, data: bytes) -> None:
    """Random bytes as a node's whole answer: facts, or the node marked unreachable with a reason."""
    result = CommandResult("dgx01", 0, data.decode("utf-8", errors="replace"), "", 0.1)
    facts, _ = parse_node_facts(ctx, "dgx01", result, [])
    assert facts.reachable or facts.error


@given(st.text(max_size=300), st.text(max_size=300))
def test_any_scheduler_text_is_absorbed_or_refused(ctx: Context, scontrol: str, squeue: str) -> None:
    """Random scontrol/squeue output from the controller: the drivers absorb it or the node is unreadable."""
    from reconciler.facts.models import ClusterFacts

    answer = {"hostname": "ctl", "files": {}, "stats": {},
              "commands": {name: {"rc": 0, "stdout": text, "stderr": ""}
                           for name, text in (("scontrol_nodes", scontrol), ("squeue", squeue))}}
    result = CommandResult(ctx.controller, 0, json.dumps(answer), "", 0.1)
    facts, commands = parse_node_facts(ctx, ctx.controller, result, [])
    cluster = ClusterFacts(controller=ctx.controller)
    for driver in all_drivers():
        absorb = getattr(driver, "absorb", None)
        if absorb is None:
            continue
        # gather() turns these into an unreadable node (tested below); anything else is a bug
        with contextlib.suppress(ValueError, TypeError, KeyError, IndexError):
            absorb(ctx, cluster, ctx.controller, facts, commands)


def test_hostile_scheduler_answer_marks_the_node_unreadable(ctx: Context) -> None:
    """A controller answering a job on a billion-node hostlist: that node's facts are refused, no crash."""
    from reconciler.engine import gather as gather_module

    class Transport:
        agents = False

        def run_many(self, specs: list, command: str, stdin: object = None) -> dict[str, CommandResult]:  # type: ignore[type-arg]
            out = {}
            for spec in specs:
                commands = {}
                if spec.name == ctx.controller:
                    commands = {"scontrol_nodes": {"rc": 0, "stdout": "", "stderr": ""},
                                "squeue": {"rc": 0, "stdout": "1|RUNNING|x[1-100000]y[1-100000]|u|j\n", "stderr": ""}}
                out[spec.name] = CommandResult(spec.name, 0, json.dumps(
                    {"hostname": spec.name, "files": {}, "stats": {}, "commands": commands}), "", 0.1)
            return out

    cluster = gather_module.gather(ctx, Transport(), all_drivers())  # type: ignore[arg-type]
    controller = cluster.nodes[ctx.controller]
    assert controller.reachable is False and "unreadable facts" in (controller.error or "")
    assert "refused before expanding" in (controller.error or "") and not cluster.jobs


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_fact_text_never_reaches_a_command_and_is_fenced_in_comments(ctx: Context, text: str) -> None:
    """Hostile text in a node's file, drain reason and service facts: not in any command; fenced in the PR comment."""
    facts = converged_facts(ctx)
    node = facts.nodes["dgx01"]
    path = next(iter(node.files))
    node.files[path] = FileFact(exists=True, content=f"{text}\n", sha256="0" * 64, mode="0644", owner="root",
                                group="root", size=len(text) + 1)
    facts.slurm_nodes["dgx01"] = SlurmNodeFact(name="dgx01", state="IDLE+DRAIN", reason=text)
    ctx.facts = facts
    try:
        plan = make_plan(ctx, all_drivers())
    finally:
        ctx.facts = converged_facts(ctx)
    assert any(c.node == "dgx01" and c.path == path for c in plan.changes if hasattr(c, "path")) or plan.changes
    for change in plan.changes:
        for op in change.ops:
            if isinstance(op, RunCommand):
                assert MARK not in op.command, op.command
            if isinstance(op, WriteFile):
                assert MARK not in op.content and MARK not in (op.validate_cmd or "") and MARK not in (op.after or "")
    comment = render_pr_comment(PrPlan(number=1, head_sha="a" * 40, head_ref="r", subdir="", status="ok",
                                       main_plan=plan, plan=plan))
    assert "\x1b" not in comment and "\u202e" not in comment
    for line in _outside_fences(comment):  # live Markdown: the hostile text only escaped there
        assert "<script>" not in line and "](http" not in line, line


def _outside_fences(markdown: str) -> list[str]:
    """The lines of MARKDOWN that GitHub renders as Markdown (not inside a ``` code fence)."""
    out, fence = [], ""
    for line in markdown.splitlines():
        stripped = line.lstrip()
        run = len(stripped) - len(stripped.lstrip("`"))
        if fence and stripped.startswith(fence) and run == len(fence) and not stripped[run:].strip():
            fence = ""
        elif not fence and run >= 3:
            fence = "`" * run
        elif not fence:
            out.append(line)
    return out
