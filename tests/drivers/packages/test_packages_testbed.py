"""`packages:` on the testbed (real apt/dpkg over real SSH, the testbed's own repository served from ctl):
a pin of a real Debian package on 4 nodes (plan folded, apply, second plan empty), a hand-installed other version
healed as drift, a human's hold on an unnamed package left alone, a downgrade refused without allow_downgrade."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cmp_to_key
from pathlib import Path

import pytest

from reconciler.common.versions import deb_compare
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[3]
NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y --allow-downgrades"


@dataclass
class Site:
    """The testbed, a desired-state copy, and the versions of the manifest's real versioned package."""

    bed: Testbed
    desired: Path
    name: str
    versions: list[str]  # oldest first
    target: str  # what test_01 pins

    def packages(self, body: str) -> None:
        """Write packages.yaml."""
        (self.desired / "packages.yaml").write_text(body)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The reconciler CLI on the desired state."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, str(self.desired)],
                              capture_output=True, text=True, timeout=600, cwd=REPO)

    def version(self, node: str, name: str) -> str:
        """NODE's installed version of NAME ('' when not installed)."""
        out = self.bed.run(node, f"dpkg-query -W -f '${{db:Status-Status}}|${{Version}}' {name}").stdout
        return out.split("|", 1)[1] if out.startswith("installed|") else ""


@pytest.fixture(scope="module")
def site(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Site:
    bed = testbed_factory(nodes=4, packages=True)
    desired = tmp_path_factory.mktemp("packages") / "desired"
    shutil.copytree(bed.desired_state, desired)
    manifest = bed.package_manifest["deb"]
    name = manifest["versioned"]
    ordered = sorted(manifest["real"][name], key=cmp_to_key(deb_compare))
    assert len(ordered) >= 2, manifest
    installed = Site(bed, desired, name, ordered, "").version("gpu01", name)
    target = ordered[-1] if installed != ordered[-1] else ordered[0]
    return Site(bed=bed, desired=desired, name=name, versions=ordered, target=target)


def _pin(site: Site, version: str, allow_downgrade: bool = False) -> None:
    site.packages(f'packages:\n  - nodes: "gpu[01-04]"\n    allow_downgrade: {str(allow_downgrade).lower()}\n'
                  f'    packages:\n      {site.name}: "{version}"\n')


def test_01_pin_on_four_nodes_folded_applied_then_clean(site: Site) -> None:
    before = {n: site.version(n, site.name) for n in NODES}
    assert len(set(before.values())) == 1 and site.target not in before.values(), before
    downgrade = deb_compare(site.target, before["gpu01"]) < 0
    _pin(site, site.target, allow_downgrade=downgrade)
    plan = site.cli("plan")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert f"{site.name} {before['gpu01']} → {site.target}" in plan.stdout and "gpu[01-04]" in plan.stdout, plan.stdout
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert {n: site.version(n, site.name) for n in NODES} == dict.fromkeys(NODES, site.target)
    again = site.cli("plan")
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr


def test_02_hand_installed_version_is_drift_healed_and_a_human_hold_stays(site: Site) -> None:
    other = next(v for v in site.versions if v != site.target)
    site.bed.run("gpu02", f"{APT} install {site.name}={other}", check=True, timeout=300)
    site.bed.run("gpu03", f"{APT} install hello && apt-mark hold hello", check=True, timeout=300)
    plan = site.cli("plan")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert f"{site.name} {other} → {site.target}" in plan.stdout and "gpu02" in plan.stdout, plan.stdout
    assert "hello" not in plan.stdout  # not named by the desired state: not ours
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert site.version("gpu02", site.name) == site.target
    assert site.bed.run("gpu03", "apt-mark showhold", check=True).stdout.split() == ["hello"]
    assert site.cli("plan").returncode == 0


def test_03_downgrade_refused_without_allow_downgrade(site: Site) -> None:
    lower = [v for v in site.versions if deb_compare(v, site.target) < 0]
    if not lower:
        pytest.skip(f"no version of {site.name} below {site.target} in the testbed repository")
    _pin(site, lower[0])
    plan = site.cli("plan")
    assert f"{site.name} {site.target} → {lower[0]} is a downgrade: set allow_downgrade: true on packages[0]" \
        in plan.stdout, plan.stdout + plan.stderr
    applied = site.cli("apply", "--yes")
    assert applied.returncode != 0
    assert {n: site.version(n, site.name) for n in NODES} == dict.fromkeys(NODES, site.target)
    _pin(site, lower[0], allow_downgrade=True)
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert {n: site.version(n, site.name) for n in NODES} == dict.fromkeys(NODES, lower[0])


def test_04_present_held_and_absent(site: Site) -> None:
    site.packages('packages:\n  - nodes: gpu01\n    packages:\n      hello: {version: present, hold: true}\n'
                  '  - nodes: gpu03\n    packages: {hello: absent}\n')
    plan = site.cli("plan")
    assert "install hello" in plan.stdout and "remove hello" in plan.stdout, plan.stdout + plan.stderr
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert site.version("gpu01", "hello") and site.version("gpu03", "hello") == "", applied.stdout
    assert site.bed.run("gpu01", "apt-mark showhold", check=True).stdout.split() == ["hello"]
    assert site.cli("plan").returncode == 0
