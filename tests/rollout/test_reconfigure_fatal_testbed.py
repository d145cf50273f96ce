"""A slurm.conf that slurmctld cannot load, on both Slurm releases: the apply says what happened, and the
rollback leaves slurmctld running the old file.

Found by hand on 24.11: `scontrol reconfigure` returned 0 and re-executed slurmctld, which died on
`fatal: failed to initialize job_submit plugin`; the apply reported the reconfigure done, the gate waited out
its timeout, and the rollback ran `scontrol reconfigure` against the dead controller ("rollback-failed",
slurmctld left dead). 22.05 re-reads in place and keeps running.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
ROLLOUT = "rollout:\n  soak: 1s\n  gates:\n    timeout: 60s\n    smoke_job: false\n"
BAD = "    JobSubmitPlugins: nonexistent\n"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The reconciler command line."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def imported(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, Path]]:
    """A running 2-node testbed of each release, adopted by `reconciler import` (its inventory added), with a
    one-wave rollout whose gates are short (no smoke job: the slurm gate is the one at stake)."""
    testbed = testbed_factory(nodes=2, bare=False, slurm=request.param)
    testbed.wait_idle()
    out = tmp_path_factory.mktemp("fatal") / "state"
    result = cli("import", "ssh://ctl", "--out", str(out), "--ssh-config", str(testbed.ssh_config),
                 "--known-hosts", str(testbed.known_hosts))
    assert result.returncode == 0, result.stdout + result.stderr
    shutil.copy(testbed.desired_state / "nodes.yaml", out / "nodes.yaml")
    cluster = out / "cluster.yaml"
    cluster.write_text(cluster.read_text() + ROLLOUT)
    yield testbed, out
    testbed.down()


def _with_bad_plugin(state: Path, into: Path) -> Path:
    shutil.copytree(state, into)
    cluster = into / "cluster.yaml"
    text = cluster.read_text()
    assert "    SlurmdParameters: config_overrides\n" in text
    cluster.write_text(text.replace("    SlurmdParameters: config_overrides\n",
                                    "    SlurmdParameters: config_overrides\n" + BAD, 1))
    return into


def _controller_up(testbed: Testbed, timeout: float = 30) -> str:
    """`scontrol ping` once it says UP (polled, bounded), else its last answer."""
    script = (f"end=$(( $(date +%s) + {int(timeout)} )); while [ $(date +%s) -lt $end ]; do "
              "scontrol ping 2>&1 | grep -q 'is UP' && break; sleep 0.2; done; scontrol ping 2>&1")
    return testbed.run("ctl", script, timeout=timeout + 10).stdout


def test_a_config_slurmctld_cannot_load_is_reported_and_rolled_back(imported: tuple[Testbed, Path],
                                                                    tmp_path: Path) -> None:
    testbed, state = imported
    bad = _with_bad_plugin(state, tmp_path / "bad")
    result = cli("apply", str(bad), "--yes")
    out = result.stdout + result.stderr
    conf = testbed.run("ctl", "cat /etc/slurm/slurm.conf", check=True).stdout
    running = testbed.run("ctl", "scontrol show config | grep -i '^JobSubmitPlugins'").stdout
    if testbed.slurm == "22.05":
        # 22.05 re-reads slurm.conf in place and keeps running (the plugin it cannot find is only logged): the
        # apply is as good as its claim, and slurmctld answers with the new file
        assert result.returncode == 0 and "rollout complete" in out, out
        assert "JobSubmitPlugins=nonexistent" in conf
        assert "is UP" in _controller_up(testbed, timeout=5)
        testbed.run("ctl", "sed -i '/^JobSubmitPlugins=/d' /etc/slurm/slurm.conf && scontrol reconfigure",
                    check=True)
        return
    # 24.11: the re-executed slurmctld died; the apply says so (with its fatal line), never that it was done
    assert result.returncode == 1, out
    assert "rollout rolled-back" in out and "rollout complete" not in out, out
    assert "FAILED ctl: scontrol reconfigure on ctl" in out, out
    assert "fatal: failed to initialize job_submit plugin" in out, out
    # the rollback put the old file back and started slurmctld (a reconfigure cannot reach a dead one)
    assert "start slurmctld (not running: instead of `scontrol reconfigure`)" in out, out
    assert "rollback-failed" not in out and "not restored" not in out, out
    assert "JobSubmitPlugins" not in conf
    assert "is UP" in _controller_up(testbed), running
    assert "nonexistent" not in testbed.run("ctl", "scontrol show config").stdout
    # and nothing is left to do or owed: the old state plans clean
    plan = cli("plan", str(state))
    assert plan.returncode == 0 and "no changes" in plan.stdout, plan.stdout + plan.stderr
