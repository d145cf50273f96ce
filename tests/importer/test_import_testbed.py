"""Adopting a running testbed: import it over SSH, plan is a no-op, one changed parameter is one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The reconciler command line."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def imported(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, Path]]:
    """A running (not bare) testbed of each Slurm release and its import over SSH, with the testbed's inventory
    added; the testbed goes down after its release's tests."""
    testbed = testbed_factory(nodes=2, bare=False, slurm=request.param)
    testbed.wait_idle()
    out = tmp_path_factory.mktemp("imported") / "state"
    result = cli("import", "ssh://ctl", "--out", str(out), "--ssh-config", str(testbed.ssh_config),
                 "--known-hosts", str(testbed.known_hosts))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "cluster.yaml").is_file() and (out / "nodes.yaml").is_file()
    # "add its inventory": the testbed's own nodes.yaml says how to reach the nodes
    shutil.copy(testbed.desired_state / "nodes.yaml", out / "nodes.yaml")
    yield testbed, out
    testbed.down()


def test_import_reads_the_running_cluster(imported: tuple[Testbed, Path]) -> None:
    testbed, out = imported
    text = (out / "cluster.yaml").read_text()
    assert f"name: {testbed.name}" in text and f'slurm_version: "{testbed.slurm}"' in text.replace("'", '"')
    assert "ReturnToService: 2" in text and "nodes: gpu[01-02]" in text


def test_first_plan_after_import_is_a_no_op(imported: tuple[Testbed, Path]) -> None:
    testbed, out = imported
    before = testbed.run("ctl", "sha256sum /etc/slurm/slurm.conf /etc/slurm/gres.conf", check=True).stdout
    result = cli("plan", str(out), "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    plan = json.loads(result.stdout)
    assert [c for c in plan["changes"] if c["action"] not in ("ok",)] == []
    assert testbed.run("ctl", "sha256sum /etc/slurm/slurm.conf /etc/slurm/gres.conf", check=True).stdout == before


def test_one_changed_parameter_is_one_line_and_its_consequence(imported: tuple[Testbed, Path],
                                                               tmp_path: Path) -> None:
    _, out = imported
    changed = tmp_path / "state"
    shutil.copytree(out, changed)
    cluster = changed / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("ReturnToService: 2", "ReturnToService: 1"))
    result = cli("plan", str(changed), "--format", "json")
    assert result.returncode == 2, result.stdout + result.stderr
    plan = json.loads(result.stdout)
    [change] = [c for c in plan["changes"] if c["action"] != "ok"]  # folded: one entry for the three nodes
    assert change["resource"] == "/etc/slurm/slurm.conf" and change["nodes"] == ["ctl", "gpu01", "gpu02"]
    edits = [line for line in change["diff"].splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert edits == ["-ReturnToService=2", "+ReturnToService=1"], change["diff"]
    assert [(f["kind"], f["target"]) for f in plan["followups"]] == [("command", "scontrol reconfigure")]
