"""PR planning end to end against the fake GitHub server, on a real Git origin with refs/pull/N/head."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest
import structlog

from reconciler.drivers.converged import file_fact
from reconciler.drivers.node_state import drain_steps
from reconciler.engine.followups import service
from reconciler.engine.plan import Change, Plan
from reconciler.engine.report import MARKER
from reconciler.facts.models import ClusterFacts, JobFact
from reconciler.forge.github import GitHubForge
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_git import export_tree
from reconciler.forge.pr_plan import PrReportResult, report_pull_requests
from reconciler.forge.pr_planning import PrPlan
from tests.forge.conftest import SUBDIR, TOKEN, Origin, converged_facts, run_git
from tests.forge.fake_github import FakeGitHub

CLUSTER = f"{SUBDIR}/cluster.yaml"
RESTART_KEY = ("    MpiDefault: none\n", "    MpiDefault: none\n    MessageTimeout: 20\n")


def report(origin: Origin, forge: GitHubForge, facts: ClusterFacts | None = None,
           conn: sqlite3.Connection | None = None, checks: list[str] | None = None) -> list[PrReportResult]:
    """One daemon cycle's PR reporting."""
    base = origin.base()
    return report_pull_requests(origin.daemon, SUBDIR, forge, facts or converged_facts(base), base, conn,
                                checks or [], structlog.get_logger())


def open_pr(origin: Origin, fake: FakeGitHub, number: int, edits: list[tuple[str, str, str]],
            branch: str | None = None) -> str:
    """Commit EDITS on a branch off main, push it as PR NUMBER; return the head sha."""
    origin.branch(branch or f"pr-{number}")
    for rel, old, new in edits:
        origin.edit(rel, old, new)
    sha = origin.commit(f"PR {number}")
    origin.push_pr(number, sha)
    fake.add_pull(number, sha, head_ref=branch or f"pr-{number}", title=f"PR {number}")
    return sha


def test_two_pushes_leave_one_comment_with_the_second_plan(origin: Origin, fake: FakeGitHub,
                                                           forge: GitHubForge) -> None:
    first = open_pr(origin, fake, 1, [(CLUSTER, 'MaxTime: "04:00:00"', 'MaxTime: "05:00:00"')])
    [result] = report(origin, forge)
    assert result.status == "created" and result.head_sha == first
    assert result.verdict == "3 change(s) on 3 node(s)"
    # a second push to the same PR branch
    origin.edit(CLUSTER, 'MaxTime: "05:00:00"', 'MaxTime: "06:00:00"')
    second = origin.commit("second push")
    origin.push_pr(1, second)
    fake.add_pull(1, second)
    [result] = report(origin, forge)
    assert result.status == "edited" and result.head_sha == second
    comments = fake.comments_on(1)
    assert len(comments) == 1 and fake.count("POST") == 1 and fake.count("PATCH") == 1
    body = comments[0]["body"]
    assert body.startswith(MARKER)
    assert second in body and first not in body
    assert "+PartitionName=batch Nodes=gpu[01-02] MaxTime=06:00:00" in body
    assert "05:00:00" not in body
    assert "**Verdict: 3 change(s) on 3 node(s)**" in body
    assert "runs `scontrol reconfigure`" in body  # MaxTime: reconfigure, no restart
    assert "restarts slurmd" not in body


def test_unchanged_head_and_facts_are_not_replanned_or_recommented(origin: Origin, fake: FakeGitHub,
                                                                  forge: GitHubForge) -> None:
    open_pr(origin, fake, 1, [(CLUSTER, 'MaxTime: "04:00:00"', 'MaxTime: "05:00:00"')])
    base = origin.base()
    facts = converged_facts(base)
    conn = sqlite3.connect(":memory:")
    assert report(origin, forge, facts, conn)[0].status == "created"
    before = len(fake.requests)
    [again] = report(origin, forge, facts, conn)
    assert again.status == "skipped"
    assert [r.path for r in fake.requests[before:]] == ["/api/v3/repos/acme/cluster/pulls"]  # no comment calls
    row = conn.execute("SELECT forge, pr, head_sha, facts_fingerprint, comment_id, updated FROM pr_reports").fetchall()
    assert len(row) == 1 and row[0][1] == 1 and row[0][2] == fake.pulls[1]["head_sha"] and row[0][4] == again.comment_id
    # the cluster changed (a job started on gpu01): re-planned; the comment shows nothing new -> unchanged
    facts.jobs.append(JobFact(job_id="77", state="RUNNING", nodes=["gpu01"]))
    assert report(origin, forge, facts, conn)[0].status == "unchanged"
    # health-check status changed: re-commented
    assert report(origin, forge, facts, conn, checks=["nccl nightly: FAILED on gpu02"])[0].status == "edited"
    assert "nccl nightly: FAILED on gpu02" in fake.comments_on(1)[0]["body"]
    assert len(fake.comments_on(1)) == 1


def test_broken_yaml_gets_the_error_with_file_and_line(origin: Origin, fake: FakeGitHub,
                                                       forge: GitHubForge) -> None:
    text = (origin.work / CLUSTER).read_text()
    line = text.splitlines().index("  slurm_version: \"22.05\"") + 1
    sha = open_pr(origin, fake, 2, [(CLUSTER, '  slurm_version: "22.05"', "  slurm_version: [22.05")])
    [result] = report(origin, forge)
    assert result.status == "created" and result.verdict.startswith("invalid")
    body = fake.comments_on(2)[0]["body"]
    assert "**Verdict: invalid: 1 validation error(s)**" in body
    assert re.search(rf"`{SUBDIR}/cluster\.yaml:{line + 1}:\d+`: .*invalid YAML", body), body
    assert sha in body
    assert "/tmp" not in body  # the temporary export is not named


def test_schema_error_names_the_key_path(origin: Origin, fake: FakeGitHub, forge: GitHubForge) -> None:
    text = (origin.work / CLUSTER).read_text()
    line = text.splitlines().index("    ReturnToService: 2") + 1
    open_pr(origin, fake, 3, [(CLUSTER, "    ReturnToService: 2", "    ReturnToService: often")])
    report(origin, forge)
    body = fake.comments_on(3)[0]["body"]
    assert f"`{SUBDIR}/cluster.yaml:{line}:" in body and "cluster.slurm_conf.ReturnToService" in body


def test_slurm_restart_lists_running_jobs_to_drain(origin: Origin, fake: FakeGitHub, forge: GitHubForge) -> None:
    open_pr(origin, fake, 4, [(CLUSTER, *RESTART_KEY)])
    facts = converged_facts(origin.base())
    facts.jobs = [JobFact(job_id="1240", state="RUNNING", nodes=["gpu02"]),
                  JobFact(job_id="1234", state="RUNNING", nodes=["gpu01", "gpu02"])]
    [result] = report(origin, forge, facts)
    body = fake.comments_on(4)[0]["body"]
    assert ("restarts slurmd on gpu[01-02] (2 nodes); 2 have running jobs and will be drained first: gpu[01-02] "
            "(jobs 1234, 1240)" in body), body
    assert "MessageTimeout changed (needs restart in 22.05)" in body


def test_drift_is_kept_apart_from_the_pr_changes(origin: Origin, fake: FakeGitHub, forge: GitHubForge) -> None:
    open_pr(origin, fake, 5, [(CLUSTER, 'MaxTime: "04:00:00"', 'MaxTime: "05:00:00"')])
    facts = converged_facts(origin.base())
    facts.nodes["gpu02"].files["/etc/slurm/prolog.sh"] = file_fact("#!/bin/sh\necho hand edit\nexit 0\n", "0755")
    [result] = report(origin, forge, facts)
    assert result.verdict == "3 change(s) on 3 node(s); 1 drift change(s) already on the cluster"
    body = fake.comments_on(5)[0]["body"]
    own, drift = body.split("#### Unmanaged drift on the cluster")
    assert "prolog.sh" not in own.split("#### Changes from this pull request")[1]
    assert "**`gpu02`**" in drift and "-echo hand edit" in drift and "slurm.conf" not in drift
    assert "**Unmanaged drift on the cluster**: 1 change(s) on 1 node(s)" in body


def test_pr_that_only_touches_other_files_has_no_changes(origin: Origin, fake: FakeGitHub,
                                                         forge: GitHubForge) -> None:
    open_pr(origin, fake, 6, [("README.md", "cluster repo", "cluster repository")])
    [result] = report(origin, forge)
    assert result.verdict == "no changes"
    assert "**Verdict: no changes**" in fake.comments_on(6)[0]["body"]


def test_huge_plan_is_posted_truncated_with_the_summary(origin: Origin, fake: FakeGitHub,
                                                        forge: GitHubForge) -> None:
    script = "".join(f"      echo step {i} of a very long prolog that nobody should write\n" for i in range(1500))
    open_pr(origin, fake, 7, [(f"{SUBDIR}/patches.yaml", "      exit 0\n", script + "      exit 0\n")])
    [result] = report(origin, forge)
    assert result.status == "created"
    assert [r.status for r in fake.requests if r.method == "POST"] == [201]  # never a 422
    body = fake.comments_on(7)[0]["body"]
    assert len(body) < 65_536
    assert "**Verdict: 2 change(s) on 2 node(s)**" in body
    assert "Diffs were shortened or left out to fit the comment limit" in body
    assert "+echo step 0 of a very long prolog" in body  # the start of each diff is kept
    assert re.search(r"\.\.\. \d+ more line\(s\) not shown", body)
    assert "git fetch origin refs/pull/7/head" in body
    assert "update /etc/slurm/prolog.sh" in body and "**`gpu[01-02]`** (2 nodes)" in body  # same diff: folded


def test_new_node_and_new_file_are_not_planned_from_absent_facts(origin: Origin, fake: FakeGitHub,
                                                                 forge: GitHubForge) -> None:
    open_pr(origin, fake, 8, [(f"{SUBDIR}/patches.yaml", "patches:\n",
                               "patches:\n  - name: epilog\n    path: /etc/slurm/epilog.sh\n    nodes: gpu01\n"
                               "    content: |\n      #!/bin/sh\n      exit 0\n")])
    [result] = report(origin, forge)
    body = fake.comments_on(8)[0]["body"]
    assert result.verdict == "no changes; 1 resource(s) not planned", result.verdict
    assert "/etc/slurm/epilog.sh" in body and "not gathered this cycle" in body
    assert "create /etc/slurm/epilog.sh" not in body.split("**Not planned**")[0]


def test_symlink_in_a_pr_is_not_followed(origin: Origin, fake: FakeGitHub, forge: GitHubForge) -> None:
    secret = origin.work.parent / "secret.yaml"
    secret.write_text("cluster: {name: TOP-SECRET-VALUE}\n")
    origin.branch("pr-9")
    os.symlink(secret, origin.work / SUBDIR / "zz-evil.yaml")
    sha = origin.commit("symlink")
    origin.push_pr(9, sha)
    fake.add_pull(9, sha)
    [result] = report(origin, forge)
    body = fake.comments_on(9)[0]["body"]
    assert "TOP-SECRET-VALUE" not in body and result.verdict == "no changes"


def test_fetch_failure_is_reported_and_other_prs_go_on(origin: Origin, fake: FakeGitHub,
                                                       forge: GitHubForge) -> None:
    fake.add_pull(10, "f" * 40)  # no refs/pull/10/head on the Git server
    open_pr(origin, fake, 11, [("README.md", "cluster repo", "x")])
    results = {r.number: r for r in report(origin, forge)}
    assert results[10].status == "failed" and "refs/pull/10/head" in (results[10].error or "")
    assert results[11].status == "created"
    assert fake.comments_on(10) == []


def test_closed_pr_refs_and_cache_rows_are_pruned(origin: Origin, fake: FakeGitHub, forge: GitHubForge) -> None:
    open_pr(origin, fake, 12, [("README.md", "cluster repo", "y")])
    conn = sqlite3.connect(":memory:")
    report(origin, forge, conn=conn)
    daemon = origin.daemon
    assert "refs/reconciler/pr/12" in run_git(daemon.working_dir, "for-each-ref", "refs/reconciler/")
    fake.pulls[12]["state"] = "closed"
    assert report(origin, forge, conn=conn) == []
    assert run_git(daemon.working_dir, "for-each-ref", "refs/reconciler/") == ""
    assert conn.execute("SELECT COUNT(*) FROM pr_reports").fetchone() == (0,)


def test_forge_down_is_logged_not_raised(origin: Origin, fake: FakeGitHub, forge: GitHubForge) -> None:
    fake.inject(503, times=100)
    with structlog.testing.capture_logs() as logs:
        assert report(origin, forge) == []
    assert any(e["event"] == "prs.list_failed" and e["transient"] for e in logs)


def test_token_never_in_logs_or_comments(origin: Origin, fake: FakeGitHub, forge: GitHubForge,
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    open_pr(origin, fake, 13, [(CLUSTER, *RESTART_KEY)])
    open_pr(origin, fake, 14, [(CLUSTER, '  slurm_version: "22.05"', "  slurm_version: [")])
    fake.add_pull(15, "e" * 40)  # fetch fails
    fake.inject_primary_rate_limit(times=1, reset_in=1)
    fake.inject(500, times=1)
    with structlog.testing.capture_logs() as logs:
        results = report(origin, forge)
        fake.inject(401, body={"message": "Bad credentials"}, times=1)
        report(origin, forge)
    assert {r.number for r in results} == {13, 14, 15}
    assert any(e["event"] == "prs.reported" for e in logs)
    everything = (repr(logs) + caplog.text + repr(results)
                  + "".join(c["body"] for c in fake.comments.values()))
    assert TOKEN not in everything


def test_fetch_never_runs_hooks_or_filters_from_the_pr(origin: Origin, fake: FakeGitHub, forge: GitHubForge) -> None:
    marker = origin.work.parent / "pwned"
    origin.branch("pr-16")
    origin.write(".gitattributes", "*.yaml filter=evil\n")
    origin.write(".githooks/post-checkout", f"#!/bin/sh\ntouch {marker}\n")
    origin.write(f"{SUBDIR}/run.sh", f"#!/bin/sh\ntouch {marker}\n")
    sha = origin.commit("hooks")
    origin.push_pr(16, sha)
    fake.add_pull(16, sha)
    [result] = report(origin, forge)
    assert result.status == "created" and result.verdict == "no changes"
    assert not marker.exists()
    subprocess.run(["git", "status"], cwd=origin.daemon.working_dir, check=True, capture_output=True)
    assert origin.daemon.head.commit.hexsha == origin.base().commit  # the daemon's checkout did not move


def test_thousands_of_changes_keep_summary_and_consequences_under_the_limit() -> None:
    changes = [Change(node=f"gpu{i:05d}", driver="slurm_config", resource="/etc/slurm/slurm.conf", action="update",
                      summary="update /etc/slurm/slurm.conf", diff=f"-MaxTime=1\n+MaxTime={i}\n") for i in range(5000)]
    plan = Plan(source="s", changes=changes,
                followups=[service(c.node, "restart", "slurmd", 30, "slurm.conf changed", rolling=True,
                                   drain=drain_steps("ctl", c.node), jobs=["99"] if c.node == "gpu00001" else [])
                           for c in changes])
    report = PrPlan(number=3, head_sha="a" * 40, head_ref="big", subdir=SUBDIR, status="ok",
                    main_plan=Plan(source="s"), plan=plan, fetch_ref="refs/pull/3/head")
    body = render_pr_comment(report, limit=65_535)
    assert len(body) <= 65_535 and body.startswith(MARKER)
    assert "**Verdict: 5000 change(s) on 5000 node(s)**" in body
    assert ("restarts slurmd on gpu[00000-04999] (5,000 nodes); 1 has running jobs and will be drained first: "
            "gpu00001 (jobs 99)") in body
    assert "Summary: slurm.conf on gpu[00000-04999] (5,000 nodes, 5000 diffs)" in body
    left = re.search(r"…and (\d+) more node\(s\) not shown", body)
    assert left and int(left.group(1)) == 5000 - body.count("<code>slurm_config</code>")
    assert "git fetch origin refs/pull/3/head" in body


def test_thousands_of_identical_changes_fold_into_one_entry() -> None:
    changes = [Change(node=f"gpu{i:05d}", driver="slurm_config", resource="/etc/slurm/slurm.conf", action="update",
                      summary="update /etc/slurm/slurm.conf",
                      diff=f"--- gpu{i:05d}:/etc/slurm/slurm.conf (current)\n+++ gpu{i:05d}:/etc/slurm/slurm.conf "
                           "(desired)\n@@ -1 +1 @@\n-MaxTime=1\n+MaxTime=2\n") for i in range(1, 5001) if i != 77]
    plan = Plan(source="s", changes=changes)
    report = PrPlan(number=3, head_sha="a" * 40, head_ref="big", subdir=SUBDIR, status="ok",
                    main_plan=Plan(source="s"), plan=plan, fetch_ref="refs/pull/3/head")
    body = render_pr_comment(report, limit=65_535)
    assert len(body) < 2_000 and "Diffs were shortened" not in body
    assert "**`gpu[00001-00076,00078-05000]`** (4,999 nodes)" in body
    assert body.count("```diff") == 1 and "--- /etc/slurm/slurm.conf (current)\n" in body and "gpu00001:" not in body


def test_thousands_of_validation_errors_still_fit() -> None:
    errors = [f"{SUBDIR}/cluster.yaml:{i}:3: nodes[{i}].name: not a valid hostlist 'x[' " * 2 for i in range(3000)]
    report = PrPlan(number=4, head_sha="b" * 40, head_ref="", subdir=SUBDIR, status="invalid",
                    main_plan=Plan(source="s"), errors=errors, fetch_ref="refs/pull/4/head")
    body = render_pr_comment(report, limit=65_535)
    assert len(body) <= 65_535 and body.startswith(MARKER)
    assert "**Verdict: invalid: 3000 validation error(s)**" in body and "b" * 40 in body
    assert f"`{SUBDIR}/cluster.yaml:0:3`" in body


def test_export_tree_writes_only_regular_files(origin: Origin, tmp_path: Path) -> None:
    """Regular files only (a symlink is left out); non-YAML files too, for the `source:` files YAML names."""
    origin.branch("export")
    origin.write(f"{SUBDIR}/sub/extra.yml", "images: []\n")
    origin.write(f"{SUBDIR}/notes.txt", "not yaml\n")
    os.symlink("/etc/hostname", origin.work / SUBDIR / "link.yaml")
    sha = origin.commit("export")
    origin.push_pr(20, sha)
    repo = origin.daemon
    repo.git.fetch("origin", "+refs/pull/20/head:refs/test/20")
    whole = export_tree(repo, sha, "", tmp_path / "whole")
    assert sorted(str(p.relative_to(whole)) for p in whole.rglob("*") if p.is_file()) == [
        "README.md", f"{SUBDIR}/cluster.yaml", f"{SUBDIR}/nodes.yaml", f"{SUBDIR}/notes.txt", f"{SUBDIR}/patches.yaml",
        f"{SUBDIR}/rollout.yaml", f"{SUBDIR}/storage.yaml", f"{SUBDIR}/sub/extra.yml"]
    sub = export_tree(repo, sha, f"{SUBDIR}/", tmp_path / "sub")
    assert (sub / "sub" / "extra.yml").read_text() == "images: []\n" and not (sub / "link.yaml").exists()
    assert list(export_tree(repo, sha, "absent", tmp_path / "absent").iterdir()) == []


def test_a_pull_request_whose_files_take_a_source_file_loads(origin: Origin, tmp_path: Path) -> None:
    """The `source:` files YAML names travel with the PR's tree (before, only YAML did: "no such file")."""
    from reconciler.desired.loader import load_dir

    origin.branch("source")
    origin.write(f"{SUBDIR}/files/motd", "hello from the PR\n")
    origin.write(f"{SUBDIR}/files.yaml", "files:\n  - {path: /etc/motd, nodes: gpu01, source: files/motd}\n")
    sha = origin.commit("a file from a source")
    origin.push_pr(21, sha)
    repo = origin.daemon
    repo.git.fetch("origin", "+refs/pull/21/head:refs/test/21")
    loaded = load_dir(export_tree(repo, sha, SUBDIR, tmp_path / "out"))
    [entry] = loaded.state.files
    assert entry._source_text == "hello from the PR\n"
