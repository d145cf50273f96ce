"""Managed files and services, data-driven (cases.yaml): facts + desired state -> changes, commands and
follow-ups; or the load errors, each with file:line and key path."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.drivers.managed_files import ManagedFilesDriver
from reconciler.drivers.services import ServicesDriver
from reconciler.engine.context import Context
from reconciler.engine.gather import build_request
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_json, render_text
from reconciler.facts.models import ClusterFacts, FileFact, JobFact, NodeFacts, ServiceFact
from tests.drivers.base_state import write_state

CASES = YAML(typ="safe").load((Path(__file__).parent / "cases.yaml").read_text())
DRIVERS = [ManagedFilesDriver(), ServicesDriver()]


def file_fact(value: Any) -> FileFact:
    """A file fact from a content string or {content, sha256, mode, owner, group}."""
    spec = value if isinstance(value, dict) else {"content": value}
    content = spec.get("content")
    sha = spec.get("sha256") or (hashlib.sha256(content.encode()).hexdigest() if content is not None else None)
    return FileFact(exists=True, sha256=sha, content=content, mode=spec.get("mode", "0644"),
                    owner=spec.get("owner", "root"), group=spec.get("group", "root"))


def facts_for(ctx: Context, case: dict[str, Any]) -> ClusterFacts:
    """The case's facts, shaped as gathering would: every asked file and service has a fact."""
    given = case.get("facts") or {}
    facts = ClusterFacts(controller=ctx.controller)
    for name in node_specs(ctx.state):
        mine = given.get(name) or {}
        node = NodeFacts(node=name, reachable=True)
        request = build_request(ctx, name, DRIVERS)
        for path in request.files:
            value = (mine.get("files") or {}).get(path)
            node.files[path] = file_fact(value) if value is not None else FileFact(exists=False)
            if path in request.secret:
                node.files[path].content = None
        for service in request.services:
            value = (mine.get("services") or {}).get(service)
            if value is None:
                node.services[service] = ServiceFact(name=service, running=False, detail="not found")
            elif isinstance(value, dict):
                node.services[service] = ServiceFact(name=service, running=value["running"],
                                                     enabled=value.get("enabled"))
            else:
                node.services[service] = ServiceFact(name=service, running=bool(value))
        facts.nodes[name] = node
    facts.jobs = [JobFact(job_id=str(job), state="RUNNING", nodes=nodes)
                  for job, nodes in (case.get("jobs") or {}).items()]
    return facts


def followup_text(step: Any) -> str:
    """A follow-up as the cases write it."""
    words = [step.node, step.kind, step.target]
    words += ["rolling"] * step.rolling + ["drain"] * (step.drain is not None) + ["ready"] * bool(step.ready)
    if step.ready_on:
        words += ["on", step.ready_on]
    if step.jobs:
        words += ["jobs", ",".join(step.jobs)]
    return " ".join(words)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict[str, Any], tmp_path: Path) -> None:
    root = write_state(tmp_path / "repo", case["desired"], case.get("repo"))
    if "errors" in case:
        with pytest.raises(DesiredStateError) as info:
            load_dir(root)
        got = [f"{e.location.file}:{e.location.line} {e.key_path()}: {e.message}" for e in info.value.errors
               if e.location]
        for want in case["errors"]:
            assert any(g.startswith(want) for g in got), f"{want!r} not in {got}"
        assert len(got) == len(case["errors"]), got
        return
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = facts_for(ctx, case)
    plan = make_plan(ctx, DRIVERS)
    expect = case["expect"]
    changing = [c for c in plan.changes if c.action != "ok"]
    assert [f"{c.node} {c.resource} {c.action}" for c in changing] == expect["changes"]
    if "followups" in expect:
        assert [followup_text(f) for f in plan.followups] == expect["followups"]
    if "commands" in expect:
        assert [f"{c.node}: {op.command}" for c in changing for op in c.ops if isinstance(op, RunCommand)] == \
            expect["commands"]
    writes = {f"{c.node} {op.path}": op for c in changing for op in c.ops if isinstance(op, WriteFile)}
    for key, content in (expect.get("writes") or {}).items():
        assert writes[key].content == content
    for key, command in (expect.get("validate") or {}).items():
        assert writes[key].validate_cmd == command
    shown = "\n".join([*(c.diff or "" for c in plan.changes), render_text(plan, show_diffs=True),
                       render_json(plan), render_json(plan, per_node=True), json.dumps(plan.model_dump(mode="json"))])
    for text in expect.get("diff_has", []):
        assert text in shown
    for text in expect.get("diff_lacks", []):
        assert text not in shown
    for text in expect.get("summary_has", []):
        assert any(text in c.summary for c in changing), [c.summary for c in changing]
    for text in expect.get("consequences_has", []):
        assert text in plan.consequences(), plan.consequences()
