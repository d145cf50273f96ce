"""Folding a plan by node set: real plans of 10,000 nodes from synthesised facts, rendered every way."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from bench.scale import write_state
from reconciler.common import hostlist
from reconciler.desired.loader import LoadedState, load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.base import HEADER_MARK, unified_diff
from reconciler.drivers.converged import converged_facts, file_fact
from reconciler.drivers.node_state import drain_steps
from reconciler.engine import fold
from reconciler.engine.context import Context
from reconciler.engine.fold import cap_nodeset, fold_changes, fold_mentions, fold_reasons_by_node, node_key
from reconciler.engine.followups import command, merge, service
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_json, render_markdown, render_text
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_planning import PrPlan

NODES = 10_000
CONF = "/etc/slurm/slurm.conf"
EVERYONE = "gpu[00001-10000],login01"  # slurm.conf is on every GPU node and the controller
OLD_LINE = "PartitionName=rack0 Nodes=gpu[00001-02500] MaxTime=2-00:00:00 State=UP"
NEW_LINE = "PartitionName=rack0 Nodes=gpu[00001-02500] MaxTime=3-00:00:00 State=UP"
HAND_EDITS = {"gpu00017": ("SchedulerType=sched/backfill", "SchedulerType=sched/builtin"),
              "gpu05000": ("HealthCheckInterval=300", "HealthCheckInterval=60")}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> LoadedState:
    root = tmp_path_factory.mktemp("scale")
    write_state(root, NODES)
    return load_dir(root)


@pytest.fixture(scope="module")
def ctx(loaded: LoadedState) -> Context:
    """10,000 GPU nodes converged, then one line of slurm.conf changed in Git (rack0's MaxTime)."""
    state = loaded.state.model_copy(deep=True)
    context = Context(loaded=dataclasses.replace(loaded, state=state), source="scale @ 0123456789ab")
    context.facts = converged_facts(context)
    state.cluster.partitions[1].max_time = "3-00:00:00"
    return context


@pytest.fixture(scope="module")
def plan(ctx: Context) -> Plan:
    return make_plan(ctx, all_drivers())


@pytest.fixture(scope="module")
def edited(ctx: Context) -> Plan:
    """The same change, with two nodes hand-edited differently and one last written from another commit."""
    saved = {n: ctx.facts.nodes[n].files[CONF] for n in [*HAND_EDITS, "gpu00100"]}
    try:
        for node, (old, new) in HAND_EDITS.items():
            ctx.facts.nodes[node].files[CONF] = file_fact((saved[node].content or "").replace(old, new))
        text = saved["gpu00100"].content or ""
        ctx.facts.nodes["gpu00100"].files[CONF] = file_fact(text.replace("scale @ ", "scale @ fedcba", 1))
        return make_plan(ctx, all_drivers())
    finally:
        for node, fact in saved.items():
            ctx.facts.nodes[node].files[CONF] = fact


def test_one_line_on_10000_nodes_is_one_diff_under_its_folded_set(plan: Plan) -> None:
    assert len(plan.changing()) == NODES + 1 and {c.resource for c in plan.changing()} == {CONF}
    md = render_markdown(plan)
    assert len(md) < 4_000, len(md)
    assert md.count("```diff") == 1 and f"-{OLD_LINE}\n+{NEW_LINE}\n" in md
    assert f"#### `{EVERYONE}` (10,001 nodes)" in md
    assert f"Summary: slurm.conf on {EVERYONE} (10,001 nodes, 1 diff)" in md
    text = render_text(plan)
    assert len(text.splitlines()) < 40, text
    assert f"\n{EVERYONE} (10,001 nodes):\n  ~ [slurm_config] update {CONF}\n--- {CONF} (current)\n" in text
    assert text.count(f"+{NEW_LINE}") == 1 and "gpu00001:" not in text
    assert text.rstrip().endswith("10001 change(s) on 10001 node(s)")


def test_json_has_folded_entries_with_nodes_and_the_per_node_form_behind_a_flag(plan: Plan) -> None:
    data = json.loads(render_json(plan))
    [entry] = data["changes"]
    assert entry["nodeset"] == EVERYONE and entry["count"] == NODES + 1 and f"+{NEW_LINE}" in entry["diff"]
    assert entry["nodes"] == sorted(plan.nodes_changing(), key=node_key)
    assert entry["nodes"][:2] == ["gpu00001", "gpu00002"] and entry["nodes"][-1] == "login01"
    assert hostlist.expand_set(entry["nodeset"]) == set(entry["nodes"])
    assert data["summary"]["verdict"] == plan.verdict() and "changes" in data and "followups" in data
    some = Plan(source=plan.source, changes=plan.changing()[:50])
    per_node = json.loads(render_json(some, per_node=True))
    assert [(c["node"], c["resource"]) for c in per_node["changes"]] == [(c.node, c.resource) for c in some.changes]
    assert per_node["changes"][0]["ops"][0]["kind"] == "write"


def test_per_node_view_is_todays_unfolded_plan(plan: Plan) -> None:
    one = Plan(source=plan.source, changes=[c for c in plan.changes if c.node == "gpu00042"])
    text = render_text(one, per_node=True)
    assert "\ngpu00042:\n" in text and f"--- gpu00042:{CONF} (current)" in text
    assert render_text(one).count(f"+{NEW_LINE}") == 1  # folded or not, one node shows one diff


def test_two_hand_edits_are_listed_apart_each_with_its_own_diff(edited: Plan) -> None:
    entries = fold_changes(edited.changing())
    assert [e.count for e in entries] == [NODES - 1, 1, 1]
    common, first, second = entries
    assert common.nodeset == "gpu[00001-00016,00018-04999,05001-10000],login01"
    assert "gpu00100" in common.nodes  # last written from another commit: the header is set aside
    assert (first.nodeset, second.nodeset) == ("gpu00017", "gpu05000")
    assert "-SchedulerType=sched/builtin\n+SchedulerType=sched/backfill" in (first.diff or "")
    assert "-HealthCheckInterval=60\n+HealthCheckInterval=300" in (second.diff or "")
    assert "HealthCheckInterval" not in (first.diff or "") and "SchedulerType" not in (common.diff or "")
    assert all(f"+{NEW_LINE}" in (e.diff or "") for e in entries)
    text = render_text(edited)
    assert f"\ngpu00017:\n  ~ [slurm_config] update {CONF}\n--- gpu00017:{CONF} (current)" in text
    assert "\ngpu05000:\n" in text and "(9,999 nodes):" in text and len(text.splitlines()) < 80
    assert f"slurm.conf on {EVERYONE} (10,001 nodes, 3 diffs)" in text
    md = render_markdown(edited)
    assert md.count("```diff") == 3 and "#### `gpu00017`" in md and "#### `gpu05000`" in md


def test_pr_comment_folds_the_same_way(plan: Plan, edited: Plan) -> None:
    for each, diffs in ((plan, 1), (edited, 3)):
        report = PrPlan(number=1, head_sha="c" * 40, head_ref="maxtime", subdir="desired-state", status="ok",
                        main_plan=Plan(source="s"), plan=each, fetch_ref="refs/pull/1/head")
        body = render_pr_comment(report)
        assert body.count("```diff") == diffs and "Diffs were shortened" not in body
        assert len(body) < 4_000 * diffs
    assert "**`gpu05000`**" in body and "(9,999 nodes)" in body


def test_slurm_consequences_fold_node_sets_and_cap_them() -> None:
    nodes = [f"dgx{i:04d}" for i in range(1, 1025)]
    drained = nodes[2::27]  # 38 scattered nodes with jobs
    jobs = {n: [str(100 + i)] for i, n in enumerate(drained)}
    plan = Plan(source="s", followups=merge([
        service(n, "restart", "slurmd", 30, f"gres.conf changed on {n}: slurmd must restart", rolling=True,
                drain=drain_steps("ctl", n), jobs=jobs.get(n, [])) for n in nodes] + [command("ctl", "true", 30, "slurmctld is not running")]))
    [_, sentence] = plan.consequences()
    assert sentence.startswith("restarts slurmd on dgx[0001-1024] (1,024 nodes); 38 have running jobs and will be "
                               "drained first: dgx[0003,0030,")
    assert ",...] (jobs 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, ...)" in sentence and len(sentence) < 300
    assert plan.consequence_reasons() == ["slurmctld is not running",
                                          "gres.conf changed on dgx[0001-1024] (1,024 nodes): slurmd must restart"]


def test_header_line_numbers_and_node_names_are_set_aside() -> None:
    before = "# x: managed by reconciler from r @ {c}.\na\nb\nc\nd\ne\nf\ng\nMaxTime=1\n"
    after = before.format(c="new").replace("MaxTime=1", "MaxTime=2")
    moved = "extra\n" * 4 + before.format(c="old")  # the same change four lines lower, and another commit
    assert HEADER_MARK == fold.HEADER_MARK
    changes = [Change(node=n, driver="d", resource="/f", action="update", summary=f"update /f on {n}",
                      diff=unified_diff("/f", n, text, after if n != "n3" else "extra\n" * 4 + after))
               for n, text in (("n1", before.format(c="a")), ("n2", before.format(c="b")), ("n3", moved))]
    [entry] = fold_changes(changes)
    assert entry.nodeset == "n[1-3]" and entry.summary == "update /f on {node}"
    assert entry.diff is not None and entry.diff.startswith("--- /f (current)\n+++ /f (desired)\n")
    other = changes[0].model_copy(update={"node": "n4", "diff": unified_diff("/f", "n4", before, "MaxTime=3\n")})
    assert [e.nodeset for e in fold_changes([*changes, other])] == ["n[1-3]", "n4"]


@pytest.mark.parametrize(("expr", "cap", "expected"), [
    ("gpu[01-16]", 20, "gpu[01-16]"),
    ("gpu[001,003,005,007,009],login01", 18, "gpu[001,003,...]"),
    ("a01,a03,a05,a07", 11, "a01,a03,..."),
])
def test_cap_nodeset_cuts_at_a_comma_and_closes_the_bracket(expr: str, cap: int, expected: str) -> None:
    assert cap_nodeset(expr, cap) == expected


def test_sentences_and_unreachable_reasons_fold_by_node_name() -> None:
    lines = ["slurmd is not running on gpu1", "slurmd is not running on gpu2", "slurmd is not running on gpu10",
             "gpu1: hardware or GRES definition changed", "nothing about nodes"]
    assert fold_mentions(lines, ["gpu1", "gpu2", "gpu10"]) == [
        "slurmd is not running on gpu[1-2,10] (3 nodes)", "gpu1: hardware or GRES definition changed",
        "nothing about nodes"]
    down = {"gpu2": "ssh: connect to host gpu2 port 22: refused", "gpu1": "ssh: connect to host gpu1 port 22: refused",
            "ctl": "timed out"}
    assert fold_reasons_by_node(down) == [("ctl", "timed out"),
                                          ("gpu[1-2] (2 nodes)", "ssh: connect to host {node} port 22: refused")]


def test_fold_keeps_every_change_once() -> None:
    rng = __import__("random").Random(17)
    changes = [Change(node=f"n{i:03d}", driver=rng.choice("ab"), resource="/r", action="update",
                      diff=f"--- n{i:03d}:/r (current)\n+++ n{i:03d}:/r (desired)\n-x\n+{rng.randint(0, 3)}\n")
               for i in range(300)]
    entries = fold_changes(changes)
    assert sorted((n, e.driver) for e in entries for n in e.nodes) == sorted((c.node, c.driver) for c in changes)
    assert len(entries) == len({(c.driver, (c.diff or "").rsplit("+", 1)[1]) for c in changes})
    for entry in entries:
        assert hostlist.expand(entry.nodeset) == list(entry.nodes)
        assert re.fullmatch(r"n\[[\d,-]+\]|n\d{3}", entry.nodeset)


def test_cli_node_takes_one_node_name(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from reconciler.cli.main import main

    bad = CliRunner().invoke(main, ["plan", str(tmp_path), "--node", "gpu[01-02]"])
    assert bad.exit_code == 1 and "--node takes one node name" in bad.output
    both = CliRunner().invoke(main, ["plan", str(tmp_path), "--node", "gpu01", "--limit", "gpu01"])
    assert both.exit_code == 1 and "give one of them" in both.output


def test_readme_example_is_the_output_of_the_generator() -> None:
    """docs/daemon.md's folded PR comment (linked from the README) is what bench.fold_example prints."""
    from bench.fold_example import example

    page = (Path(__file__).resolve().parents[2] / "docs" / "daemon.md").read_text()
    block = page.split("## A folded PR comment", 1)[1].split("````markdown\n", 1)[1].split("````", 1)[0]
    assert block == example(1024, "pr")
    assert "**`gpu[00001-00016,00018-00511,00513-01024],login01`** (1,023 nodes)" in block
