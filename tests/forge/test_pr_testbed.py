"""A PR comment planned against a real cluster: the testbed configured by `reconciler apply`, a running job."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from reconciler.drivers import all_drivers
from reconciler.engine.run import open_reconcile
from reconciler.forge.github import GitHubForge
from reconciler.forge.pr_plan import report_pull_requests
from tests.engine.testbed_state import write_state
from tests.forge.conftest import SUBDIR, Origin
from tests.forge.fake_github import FakeGitHub
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
SLURM_FILES = "sha256sum /etc/slurm/slurm.conf"


def _wait(check: Callable[[], bool], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False


def test_pr_touching_slurm_conf_lists_the_restart_and_the_running_job(
        testbed_factory: Callable[..., Testbed], tmp_path: Path, fake: FakeGitHub, forge: GitHubForge) -> None:
    bed = testbed_factory(nodes=2, bare=True)
    origin = Origin(tmp_path)
    write_state(origin.work / SUBDIR, name="rtfpr", state_dir=bed.state_dir, subnet=bed.subnet,
                computes="gpu[01-02]")
    origin.commit("desired state")
    origin.push_main()
    base = origin.base()

    # The main branch applied to the bare testbed, as the daemon would.
    applied = subprocess.run([sys.executable, "-m", "reconciler.cli", "apply", str(base.root), "--yes"],
                             capture_output=True, text=True, timeout=300, cwd=REPO)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    bed.wait_idle(timeout=90)
    job = bed.run("ctl", "sbatch --parsable -N1 -w gpu01 -o /dev/null --wrap 'sleep 300'", check=True).stdout.strip()
    try:
        assert job.isdigit(), job
        assert _wait(lambda: bed.run("ctl", f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING")

        # This cycle's facts for main: one SSH round trip per node, reused for every PR.
        reconcile = open_reconcile(base, all_drivers())
        try:
            reconcile.gather()
            facts = reconcile.ctx.facts
            assert not reconcile.plan().has_changes  # main is converged
        finally:
            reconcile.close()
        assert [j.job_id for j in facts.jobs_on("gpu01")] == [job]

        # A PR changing a slurm.conf key that 22.05 only applies on restart.
        origin.branch("message-timeout")
        origin.edit(f"{SUBDIR}/cluster.yaml", "    MpiDefault: none\n",
                    "    MpiDefault: none\n    MessageTimeout: 20\n")
        sha = origin.commit("MessageTimeout 20")
        origin.push_pr(1, sha)
        fake.add_pull(1, sha, head_ref="message-timeout", title="Longer MessageTimeout")
        before = {node: bed.run(node, SLURM_FILES, check=True).stdout for node in bed.nodes}

        results = report_pull_requests(origin.daemon, SUBDIR, forge, facts, base, None, [],
                                       structlog.get_logger())

        assert [(r.number, r.status, r.head_sha) for r in results] == [(1, "created", sha)]
        [comment] = fake.comments_on(1)
        body = comment["body"]
        assert "**Verdict: 3 change(s) on 3 node(s)**" in body
        assert "restarts slurmctld on ctl" in body
        assert (f"restarts slurmd on gpu[01-02] (2 nodes); 1 has running jobs and will be drained first: gpu01 "
                f"(jobs {job})" in body), body
        assert "+MessageTimeout=20" in body and sha in body
        assert "Unmanaged drift" not in body
        # Planning a PR changes nothing on the cluster: same files, the job still runs, nothing drained.
        assert {node: bed.run(node, SLURM_FILES, check=True).stdout for node in bed.nodes} == before
        assert bed.run("ctl", f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING"
        assert "drain" not in bed.run("ctl", "sinfo -h -N -o '%N %t'").stdout
    finally:
        bed.run("ctl", f"scancel {job}")
