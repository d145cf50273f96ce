"""A single-cluster repository's PR comments stay byte for byte what they were before multi-cluster comments.

golden/single_cluster_comments.json was recorded with the code before issue 37 (commit 7ea7810) from this very
scenario; commit shas are replaced by placeholders (they depend on the temporary paths in the YAML). A change
to the comment's layout on purpose bumps RENDER_VERSION and re-records it: RECORD_GOLDEN=1 pytest this file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import structlog

from reconciler.drivers.converged import file_fact
from reconciler.facts.models import JobFact
from reconciler.forge.github import GitHubForge
from reconciler.forge.pr_plan import report_pull_requests
from tests.forge.conftest import SUBDIR, Origin, converged_facts
from tests.forge.fake_github import FakeGitHub

GOLDEN = Path(__file__).parent / "golden" / "single_cluster_comments.json"
C = f"{SUBDIR}/cluster.yaml"
PRS = [[(C, 'MaxTime: "04:00:00"', 'MaxTime: "05:00:00"')],
       [(C, '  slurm_version: "22.05"', "  slurm_version: [22.05")],
       [(C, "    ReturnToService: 2", "    ReturnToService: often")],
       [(C, "    MpiDefault: none\n", "    MpiDefault: none\n    MessageTimeout: 20\n")]]


def test_single_cluster_comments_are_unchanged(origin: Origin, fake: FakeGitHub, forge: GitHubForge) -> None:
    shas = {origin.push_main(): "<main>"}
    for number, edits in enumerate(PRS, 1):
        origin.branch(f"pr-{number}")
        for rel, old, new in edits:
            origin.edit(rel, old, new)
        sha = origin.commit(f"PR {number}")
        origin.push_pr(number, sha)
        fake.add_pull(number, sha, head_ref=f"pr-{number}")
        shas[sha] = f"<head-{number}>"
    base = origin.base()
    facts = converged_facts(base)
    facts.jobs = [JobFact(job_id="1234", state="RUNNING", nodes=["gpu01", "gpu02"])]
    facts.nodes["gpu02"].files["/etc/slurm/prolog.sh"] = file_fact("#!/bin/sh\necho hand edit\nexit 0\n", "0755")
    checks = ["nccl: FAILED on gpu02"]
    first = report_pull_requests(origin.daemon, SUBDIR, forge, facts, base, None, checks, structlog.get_logger())
    before = len(fake.requests)
    second = report_pull_requests(origin.daemon, SUBDIR, forge, facts, base, None, checks, structlog.get_logger())

    def blind(text: str) -> str:
        for sha, name in shas.items():
            text = text.replace(sha, name).replace(sha[:12], name)
        return text

    got = {"results": [[r.number, r.status, r.verdict] for r in first] + [[r.number, r.status] for r in second],
           "second_cycle": [[r.method, r.path] for r in fake.requests[before:]],
           "requests": [[r.method, r.path, r.status] for r in fake.requests],
           "bodies": {str(n): [blind(c["body"]) for c in fake.comments_on(n)] for n in range(1, len(PRS) + 1)}}
    if os.environ.get("RECORD_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip("recorded")
    assert got == json.loads(GOLDEN.read_text())
