"""Testbed package repository (issue 33, item 4): `testbed up --packages` serves real Debian packages and stand-ins
from ctl; apt's only source on every node is that repository, and Debian's dnf/rpm install the stand-in rpms."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.testbed_fixture import Testbed, _testbed_cli

pytestmark = pytest.mark.testbed

APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y"


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A 2-node testbed with the package repository."""
    return testbed_factory(nodes=2, packages=True)


def _madison(bed: Testbed, node: str, package: str) -> list[tuple[str, str]]:
    """(version, source) pairs `apt-cache madison PACKAGE` lists on NODE."""
    out = bed.run(node, f"apt-cache madison {package}", check=True).stdout
    rows = [[p.strip() for p in line.split("|")] for line in out.splitlines() if line.strip()]
    return [(r[1], r[2]) for r in rows if len(r) == 3 and r[0] == package]


def test_manifest_lists_real_and_standin_versions(bed: Testbed) -> None:
    """manifest.json: a real package with two or more versions, the present/absent one, stand-ins for deb and rpm."""
    m = bed.package_manifest
    versioned = m["deb"]["versioned"]
    assert len(m["deb"]["real"][versioned]) >= 2
    assert m["deb"]["real"]["hello"]
    assert m["deb"]["installed"]["hello"] is None  # absent on the nodes at up: present/absent can be shown
    for kind in ("deb", "rpm"):
        assert set(m[kind]["standin"]) == {"nvidia-driver-standin", "nvidia-fabricmanager-standin",
                                           "libnvidia-nscq-standin"}
        assert all(len(v) >= 2 for v in m[kind]["standin"].values())
        assert m[kind]["url"].startswith(m["url"])
    assert m["url"] == "http://ctl:8873"


def test_apt_sees_only_the_testbed_repository(bed: Testbed) -> None:
    """Every manifest version of the real versioned package, and nothing from another source (signed, no trust
    override)."""
    m = bed.package_manifest
    versioned = m["deb"]["versioned"]
    rows = _madison(bed, "gpu01", versioned)
    assert sorted(v for v, _ in rows) == sorted(m["deb"]["real"][versioned])
    assert {src for _, src in rows} == {f"{m['deb']['url']} ./ Packages"}
    policy = bed.run("gpu01", "apt-cache policy", check=True).stdout
    sources = set(re.findall(r"^\s+\d+ (\S+)", policy, re.M))
    assert sources == {m["deb"]["url"], "/var/lib/dpkg/status"}, policy
    lists = bed.run("gpu01", "ls /var/lib/apt/lists", check=True).stdout.split()
    assert any(name.endswith("InRelease") for name in lists), lists  # signed, verified with the testbed's key
    assert bed.run("gpu01", "ls /etc/apt/sources.list.d", check=True).stdout.split() == [
        "reconciler-testbed.sources"]  # the host's sources are hidden
    assert bed.run("gpu01", "test -e /etc/apt/sources.list").returncode != 0
    conf = bed.run("gpu01", "cat /etc/apt/sources.list.d/reconciler-testbed.sources", check=True).stdout
    assert "trusted=yes" not in conf and "Signed-By: /etc/apt/keyrings/reconciler-testbed.gpg" in conf


def test_apt_installs_from_the_repository_on_one_node_only(bed: Testbed) -> None:
    """hello (real, absent before) and a stand-in with its same-version dependency install on gpu01 only."""
    m = bed.package_manifest
    assert bed.run("gpu01", "dpkg-query -W hello").returncode != 0
    bed.run("gpu01", f"{APT} install hello", check=True)
    assert bed.run("gpu01", "hello", check=True).stdout.strip() == "Hello, world!"
    assert bed.run("gpu01", "dpkg-query -W -f '${Version}' hello", check=True).stdout in m["deb"]["real"]["hello"]
    assert bed.run("gpu02", "dpkg-query -W hello").returncode != 0  # gpu02 unaffected
    assert bed.run("ctl", "dpkg-query -W hello").returncode != 0
    oldest = m["deb"]["standin"]["nvidia-fabricmanager-standin"][0]
    # apt's candidate for the dependency is the newest: an older pair is pinned together, as a driver must
    pinned_alone = bed.run("gpu01", f"{APT} install nvidia-fabricmanager-standin={oldest}")
    assert pinned_alone.returncode != 0 and "nvidia-driver-standin (= " in pinned_alone.stdout
    bed.run("gpu01", f"{APT} install nvidia-fabricmanager-standin={oldest} nvidia-driver-standin={oldest}", check=True)
    got = bed.run("gpu01", "dpkg-query -W -f '${Package}=${Version}\\n' 'nvidia-*-standin'", check=True).stdout
    assert sorted(got.split()) == [f"nvidia-driver-standin={oldest}", f"nvidia-fabricmanager-standin={oldest}"]
    desc = bed.run("gpu01", "dpkg-query -W -f '${Description}' nvidia-driver-standin", check=True).stdout
    assert "STAND-IN" in desc
    assert bed.run("gpu02", "dpkg-query -W nvidia-driver-standin").returncode != 0


def test_dnf_lists_and_installs_standin_rpms(bed: Testbed) -> None:
    """Debian's dnf on a node: every stand-in rpm version listed, one installed, `rpm -q` shows it; no warnings."""
    m = bed.package_manifest
    listing = bed.run("gpu02", "dnf -q list --available --showduplicates 'nvidia-*-standin'", check=True)
    assert listing.stderr == ""  # no "Unable to detect release version", no _dnf_local repository
    seen = {(n.split(".")[0], v) for n, v, _ in (line.split() for line in listing.stdout.splitlines()[1:])}
    want = {(name, v) for name, versions in m["rpm"]["standin"].items()
            for v in [*versions, m["rpm"]["standin_broken"][name]] if name.startswith("nvidia-")}
    assert seen == want
    version = m["rpm"]["standin"]["nvidia-driver-standin"][0]
    bed.run("gpu02", f"dnf -y -q install nvidia-driver-standin-{version.rsplit('-', 1)[0]}", check=True)
    assert bed.run("gpu02", "rpm -q nvidia-driver-standin", check=True).stdout.strip() == \
        f"nvidia-driver-standin-{version}.noarch"
    assert bed.run("gpu02", "rpm --eval %_dbpath", check=True).stdout.strip() == "/var/lib/rpm"
    repos = bed.run("gpu02", "dnf -q repolist", check=True).stdout.split("\n", 1)[1]
    assert [line.split()[0] for line in repos.splitlines()] == ["reconciler-testbed"]  # not the `local` plugin's
    assert bed.run("gpu01", "rpm -q nvidia-driver-standin").returncode != 0  # each node its own rpmdb


def test_up_again_is_idempotent_and_refuses_other_options(bed: Testbed) -> None:
    """`up --packages` on the running testbed changes nothing; `up` without --packages refuses."""
    args = ["up", "--name", bed.name, "--subnet", bed.subnet, "--nodes", str(len(bed.computes))]
    again = _testbed_cli(*args, "--packages")
    assert again.returncode == 0 and again.stdout.strip() == str(bed.desired_state), again.stderr
    other = _testbed_cli(*args)
    assert other.returncode == 1 and "packages=True" in other.stderr, other.stderr


def test_down_leaves_nothing(testbed_factory: Callable[..., Testbed]) -> None:
    """A 1-node testbed with packages: down kills ctl's HTTP server and removes the state with the repository."""
    small = testbed_factory(nodes=1, packages=True)
    server = [p for p in small.host_pids("ctl", "python3") if b"http.server" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(server) == 1
    assert (small.state_dir / "packages" / "manifest.json").exists()
    small.down()
    assert not Path(f"/proc/{server[0]}").exists()
    assert not small.state_dir.exists()
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert not [n for n in netns if n.startswith(f"{small.name}-")]
