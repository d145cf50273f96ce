"""`testbed up --slurm RELEASE`: the nodes run that Slurm release (the host's, or a debootstrapped Debian root)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.testbed_fixture import ALL_RELEASES, SLURM_RELEASES, Testbed, host_release

HERE = Path(__file__).resolve().parents[2] / "deploy" / "testbed"
sys.path.insert(0, str(HERE))
import slurm_root  # noqa: E402  (deploy/testbed is not a package)

PYTHON = {"22.05": "3.11", "24.11": "3.13", "26.05": "3.14"}  # Debian 12's, 13's and forky's python3


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def bed(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed]) -> Iterator[Testbed]:
    """A 2-node testbed of each release, with accounting (slurmdbd and MariaDB from the same root)."""
    bed = testbed_factory(nodes=2, accounting=True, slurm=request.param)
    yield bed
    bed.down()


def test_every_daemon_and_client_is_the_release(bed: Testbed) -> None:
    """slurmctld, slurmd, slurmdbd and the clients on the nodes are the asked release; jobs run; python3 is the
    release's Debian one (the fact agent runs on it)."""
    for node in bed.nodes:
        out = bed.run(node, "scontrol --version; slurmd -V; python3 -c 'import sys; print(sys.version)'",
                      check=True).stdout
        assert re.search(rf"slurm(-wlm)? {re.escape(bed.slurm)}\.\d+", out), out
        assert PYTHON[bed.slurm] in out.splitlines()[-1], out
    ctl = bed.run("ctl", "slurmctld -V; slurmdbd -V; sacctmgr -V; srun -N2 hostname | sort", check=True).stdout
    assert ctl.count(bed.slurm) == 3, ctl
    assert ctl.splitlines()[-2:] == bed.computes, ctl
    assert bed.name in bed.run("ctl", "sacctmgr -n -P show cluster format=cluster", check=True).stdout


def test_state_names_the_release_and_its_root(bed: Testbed) -> None:
    """state.json and the desired state carry the release; the lower layer is / only for the host's release."""
    state = json.loads((bed.state_dir / "state.json").read_text())
    assert state["slurm"] == bed.slurm
    if bed.slurm == host_release():
        assert state["lower"] == "/"
    else:
        root = Path(state["lower"])
        assert root == slurm_root.built_root(bed.slurm) and slurm_root.is_built(root)
        assert slurm_root.installed_release(root) == bed.slurm
    assert f'slurm_version: "{bed.slurm}"' in (bed.desired_state / "cluster.yaml").read_text()


def test_up_again_with_another_release_is_refused(bed: Testbed) -> None:
    """The same name brought up with the other release is refused while it runs, naming both."""
    other = next(r for r in SLURM_RELEASES if r != bed.slurm)
    proc = subprocess.run([str(HERE / "testbed"), "up", "--name", bed.name, "--subnet", bed.subnet, "--nodes", "2",
                           "--accounting", "--slurm", other], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    assert f"Slurm {bed.slurm}" in proc.stderr and "run down first" in proc.stderr, proc.stderr
    assert bed.run("ctl", "sinfo -h -o %a", check=True).stdout.strip() == "up"


def test_a_root_key_follows_its_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed package list names another root (so it is rebuilt), the same list the same one."""
    release = SLURM_RELEASES[-1]
    before = slurm_root.built_root(release)
    monkeypatch.setattr(slurm_root, "ROOT_PACKAGES", [*slurm_root.ROOT_PACKAGES, "less"])
    assert slurm_root.built_root(release) != before
    monkeypatch.undo()
    assert slurm_root.built_root(release) == before
    assert slurm_root._release_of("24.11.5-4+deb13u1") == "24.11"
    assert slurm_root._release_of("1:22.05.8-4") == "22.05"


def test_every_release_has_its_suite_and_its_own_root() -> None:
    """The fixture's releases are the testbed's, each built from its own suite (26.05 from forky, with
    debootstrap's sid script where debootstrap has no forky one) into a root of its own."""
    assert tuple(slurm_root.RELEASES) == ALL_RELEASES and set(SLURM_RELEASES) < set(ALL_RELEASES)
    assert slurm_root.RELEASES["26.05"] == "forky" and slurm_root.RELEASES["24.11"] == "trixie"
    assert len({slurm_root.built_root(r) for r in ALL_RELEASES}) == len(ALL_RELEASES)
    assert slurm_root.SUITE_SCRIPTS["forky"] == "sid"
