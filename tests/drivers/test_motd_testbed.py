"""`motd:` on the testbed (real SSH, each Slurm release of SLURM_RELEASES), the kind added through README's four files only:

- validate refuses a selector naming nodes not in the inventory, at its file:line, and nothing on a node moves;
- `plan` shows the writes and changes nothing on the nodes;
- apply writes each node's file exactly; a second apply changes nothing (not even the files' times);
- a node's file edited by hand is put back on that node alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
NODES = ("ctl", "gpu01", "gpu02")
COMPUTE = "GPU nodes: jobs through Slurm only\n"
CONTROLLER = "controller: no jobs here\n"
GOOD = f"""\
motd:
  - roles: [compute]
    content: {json.dumps(COMPUTE)}
  - nodes: ctl
    content: {json.dumps(CONTROLLER)}
"""
BAD = """\
motd:
  - roles: [compute]
    content: "x\\n"
  - nodes: "gpu[01-09]"
    path: /etc/motd.d/site
    content: "y\\n"
"""


@dataclass
class Site:
    """The testbed, converged to its own desired state, and a copy of that state to which motd.yaml is added."""

    bed: Testbed
    desired: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The reconciler CLI on the desired state."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, str(self.desired)],
                              capture_output=True, text=True, timeout=300, cwd=REPO)

    def motd(self, text: str) -> None:
        (self.desired / "motd.yaml").write_text(text)

    def files(self) -> dict[str, str]:
        """Per node: /etc/motd's sha256, size, mode, mtime and ctime (ns), or that it is missing."""
        cmd = ("f=/etc/motd; if [ -e $f ]; then sha256sum $f | cut -c1-64; stat -c '%s %a %.9Y %.9Z' $f; "
               "else echo missing; fi")
        return {node: self.bed.run(node, cmd, check=True).stdout for node in NODES}


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def site(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory,
         request: pytest.FixtureRequest) -> Site:
    bed = testbed_factory(nodes=2, bare=False, slurm=request.param)
    desired = tmp_path_factory.mktemp("motd") / "desired"
    shutil.copytree(bed.desired_state, desired)
    site = Site(bed=bed, desired=desired)
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    return site


def test_01_validate_refuses_a_selector_outside_the_inventory_at_its_line(site: Site) -> None:
    before = site.files()
    site.motd(BAD)
    for command in ("validate", "plan"):
        result = site.cli(command)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "motd.yaml:4:5: motd[1].nodes: unknown nodes: gpu[03-09]" in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
    assert site.files() == before


def test_02_plan_shows_the_writes_and_changes_nothing(site: Site) -> None:
    before = site.files()
    site.motd(GOOD)
    assert site.cli("validate").returncode == 0
    plan = site.cli("plan")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "gpu[01-02] (2 nodes):\n  ~ [motd] update /etc/motd\n" in plan.stdout, plan.stdout
    assert "ctl:\n  ~ [motd] update /etc/motd\n" in plan.stdout, plan.stdout
    assert f"\n+{COMPUTE}" in plan.stdout and f"\n+{CONTROLLER}" in plan.stdout, plan.stdout
    assert site.files() == before, "plan changed a node"


def test_03_apply_writes_each_nodes_file_exactly(site: Site) -> None:
    site.motd(GOOD)
    result = site.cli("apply", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    for node, text in (("ctl", CONTROLLER), ("gpu01", COMPUTE), ("gpu02", COMPUTE)):
        assert site.bed.run(node, "cat /etc/motd", check=True).stdout == text
        assert site.bed.run(node, "stat -c '%a %U %G' /etc/motd", check=True).stdout.split() == ["644", "root",
                                                                                                   "root"]
    plan = site.cli("plan")
    assert plan.returncode == 0 and "no changes" in plan.stdout, plan.stdout + plan.stderr


def test_04_apply_again_changes_nothing(site: Site) -> None:
    site.motd(GOOD)
    before = site.files()
    result = site.cli("apply", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no changes" in result.stdout, result.stdout
    assert site.files() == before


def test_05_a_hand_edit_is_put_back_on_that_node_alone(site: Site) -> None:
    site.motd(GOOD)
    site.bed.run("gpu02", "echo 'edited by hand' > /etc/motd", check=True)
    before = site.files()
    plan = site.cli("plan")
    assert plan.returncode == 2 and "-edited by hand" in plan.stdout, plan.stdout
    assert "gpu02:\n  ~ [motd] update /etc/motd\n" in plan.stdout, plan.stdout
    assert "1 change(s) on 1 node(s)" in plan.stdout, plan.stdout
    result = site.cli("apply", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    after = site.files()
    assert after["gpu01"] == before["gpu01"] and after["ctl"] == before["ctl"]
    assert site.bed.run("gpu02", "cat /etc/motd", check=True).stdout == COMPUTE
    assert site.cli("plan").returncode == 0
