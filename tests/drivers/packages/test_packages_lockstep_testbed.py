"""One package transaction per node on the testbed (real apt/dpkg and Debian's real dnf/rpm over real SSH, the
testbed's own repository on ctl; the packages are the testbed's STAND-INS nvidia-driver-standin and
nvidia-fabricmanager-standin, whose fabric manager depends on the driver of its exact version).

apt on gpu[01-02]: the pair installed, pinned 550 -> 570 with `needs: reboot` (plan folded, held without
--allow reboot, applied with it, the driver's hold lifted and put back), second plan empty, then back to 550 with
allow_downgrade. dnf on gpu03 (`package_manager: dnf`): no metadata cache is a clear error, the pair installed
with a versionlock, second plan empty, a hand downgrade past the lock healed, the lock kept on the new version."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cmp_to_key
from pathlib import Path

import pytest

from reconciler.common.versions import deb_compare, rpm_compare
from tests.drivers.packages.testbed_desired import DNF_NODE, with_dnf_node
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[3]
DRIVER, FM = "nvidia-driver-standin", "nvidia-fabricmanager-standin"
APT_NODES = ["gpu01", "gpu02"]


@dataclass
class Site:
    """The testbed, a desired-state copy, the stand-in versions (oldest first) of deb and rpm."""

    bed: Testbed
    desired: Path
    deb: list[str]
    rpm: list[str]

    def packages(self, body: str) -> None:
        """Write packages.yaml."""
        (self.desired / "packages.yaml").write_text(body)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The reconciler CLI on the desired state."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, str(self.desired)],
                              capture_output=True, text=True, timeout=600, cwd=REPO)

    def deb_version(self, node: str, name: str) -> str:
        """NODE's installed version of NAME by dpkg ('' when not installed)."""
        out = self.bed.run(node, f"dpkg-query -W -f '${{db:Status-Status}}|${{Version}}' {name}").stdout
        return out.split("|", 1)[1] if out.startswith("installed|") else ""

    def rpm_version(self, node: str, name: str) -> str:
        """NODE's installed version of NAME by rpm ('' when not installed)."""
        out = self.bed.run(node, f"rpm -q --qf '%{{VERSION}}-%{{RELEASE}}' {name}")
        return out.stdout if out.returncode == 0 else ""

    def pair(self, node: str) -> tuple[str, str]:
        """The installed versions of the pair on NODE, by its package manager."""
        get = self.rpm_version if node == DNF_NODE else self.deb_version
        return get(node, DRIVER), get(node, FM)


@pytest.fixture(scope="module")
def site(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Site:
    bed = testbed_factory(nodes=3, packages=True)
    desired = with_dnf_node(bed, tmp_path_factory.mktemp("lockstep") / "desired")
    manifest = bed.package_manifest
    deb = sorted(manifest["deb"]["standin"][DRIVER], key=cmp_to_key(deb_compare))
    rpm = sorted(manifest["rpm"]["standin"][DRIVER], key=cmp_to_key(rpm_compare))
    assert len(deb) >= 2 and len(rpm) >= 2 and manifest["deb"]["standin"][FM] == manifest["deb"]["standin"][DRIVER]
    return Site(bed=bed, desired=desired, deb=deb, rpm=rpm)


def _apt_pair(site: Site, version: str, needs: bool, allow_downgrade: bool = False) -> str:
    driver = f'{{version: "{version}", hold: true{", needs: reboot" if needs else ""}}}'
    return (f'  - nodes: "gpu[01-02]"\n    allow_downgrade: {str(allow_downgrade).lower()}\n    packages:\n'
            f'      {DRIVER}: {driver}\n      {FM}: "{version}"\n')


def _dnf_pair(version: str, allow_downgrade: bool = False) -> str:
    return (f'  - nodes: {DNF_NODE}\n    allow_downgrade: {str(allow_downgrade).lower()}\n    packages:\n'
            f'      {DRIVER}: {{version: "{version}", hold: true}}\n      {FM}: "{version}"\n')


def _ok(proc: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert proc.returncode == code, f"exit {proc.returncode}, wanted {code}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _transactions(site: Site) -> int:
    """How many transactions dnf's history holds on the dnf node."""
    out = site.bed.run(DNF_NODE, "dnf -q history list", check=True).stdout
    return sum(1 for line in out.splitlines() if line.strip()[:1].isdigit())


def test_01_apt_pair_upgrade_held_then_allowed_then_downgraded(site: Site) -> None:
    old, new = site.deb[0], site.deb[-1]
    assert all(site.pair(n) == ("", "") for n in APT_NODES)
    site.packages("packages:\n" + _apt_pair(site, old, needs=False))
    out = _ok(site.cli("apply", "--yes"))
    assert all(site.pair(n) == (old, old) for n in APT_NODES), out
    assert all(site.bed.run(n, "apt-mark showhold", check=True).stdout.split() == [DRIVER] for n in APT_NODES)
    _ok(site.cli("plan"))

    site.packages("packages:\n" + _apt_pair(site, new, needs=True))
    text = _ok(site.cli("plan"), 2)
    summary = f"{DRIVER} {old} → {new}, {FM} {old} → {new} (needs a reboot)"
    assert "gpu[01-02]:" in text and text.count(summary) == 1, text
    held = _ok(site.cli("apply", "--yes"), 2)
    assert f"HELD gpu[01-02]: {summary}" in held, held
    assert all(site.pair(n) == (old, old) for n in APT_NODES)  # held: nothing ran

    out = _ok(site.cli("apply", "--yes", "--allow", "reboot"))
    assert all(site.pair(n) == (new, new) for n in APT_NODES), out
    assert all(site.bed.run(n, "apt-mark showhold", check=True).stdout.split() == [DRIVER] for n in APT_NODES)
    assert "no changes" in _ok(site.cli("plan"))

    site.packages("packages:\n" + _apt_pair(site, old, needs=True))
    assert "is a downgrade: set allow_downgrade: true on packages[0]" in site.cli("plan").stdout
    site.packages("packages:\n" + _apt_pair(site, old, needs=True, allow_downgrade=True))
    out = _ok(site.cli("apply", "--yes", "--allow", "reboot"))
    assert all(site.pair(n) == (old, old) for n in APT_NODES), out
    assert "no changes" in _ok(site.cli("plan"))


def test_02_a_lone_driver_downgrade_never_removes_the_fabric_manager(site: Site) -> None:
    """Only the driver named, a version below the installed fabric manager's: apt-get --no-remove refuses
    (apt alone would remove the fabric manager to make room); the apply fails and both stay."""
    old, new = site.deb[0], site.deb[-1]
    site.packages("packages:\n" + _apt_pair(site, new, needs=False))
    _ok(site.cli("apply", "--yes"))
    site.packages(f'packages:\n  - nodes: gpu01\n    allow_downgrade: true\n    packages: {{{DRIVER}: "{old}"}}\n')
    out = _ok(site.cli("apply", "--yes"), 1)
    assert "remove is disabled" in out or "Packages need to be removed" in out, out
    assert site.pair("gpu01") == (new, new)
    assert site.bed.run("gpu01", "apt-mark showhold", check=True).stdout.split() == [DRIVER]  # hold put back


def test_03_dnf_without_metadata_cache_is_a_clear_error(site: Site) -> None:
    site.packages("packages:\n" + _dnf_pair(site.rpm[-1]))
    out = _ok(site.cli("plan"), 1)
    assert "dnf makecache" in out and "Cache-only enabled but no cache" in out, out
    assert site.pair(DNF_NODE) == ("", "")
    cache = site.bed.run(DNF_NODE, "ls /var/cache/dnf", check=True).stdout.split()
    assert not [f for f in cache if f.startswith("reconciler-testbed")], cache  # plan refreshed nothing
    site.bed.run(DNF_NODE, "dnf -q makecache", check=True, timeout=300)  # what a repo file's follow-up would do


def test_04_dnf_pair_installed_locked_then_clean(site: Site) -> None:
    new = site.rpm[-1]
    site.packages("packages:\n" + _dnf_pair(new))
    text = _ok(site.cli("plan"), 2)
    assert f"install {DRIVER} {new} and hold, install {FM} {new}" in text, text
    out = _ok(site.cli("apply", "--yes"))
    assert site.pair(DNF_NODE) == (new, new), out
    locks = site.bed.run(DNF_NODE, "dnf -q versionlock list", check=True).stdout.split()
    assert locks == [f"{DRIVER}-0:{new}.*"], locks
    assert "no changes" in _ok(site.cli("plan"))


def test_05_dnf_hand_downgrade_is_drift_healed_lock_kept(site: Site) -> None:
    old, new = site.rpm[0], site.rpm[-1]
    site.bed.run(DNF_NODE, f"dnf -y -q --disableplugin=versionlock install {DRIVER}-{old} {FM}-{old}",
                 check=True, timeout=300)
    assert site.pair(DNF_NODE) == (old, old)
    text = _ok(site.cli("plan"), 2)
    assert f"{DRIVER} {old} → {new}, {FM} {old} → {new}" in text, text
    out = _ok(site.cli("apply", "--yes"))
    assert site.pair(DNF_NODE) == (new, new), out
    locks = site.bed.run(DNF_NODE, "dnf -q versionlock list", check=True).stdout.split()
    assert locks == [f"{DRIVER}-0:{new}.*"], locks
    assert "no changes" in _ok(site.cli("plan"))


def test_06_dnf_pair_downgrade_allowed_in_one_transaction(site: Site) -> None:
    old = site.rpm[0]
    before = _transactions(site)
    site.packages("packages:\n" + _dnf_pair(old, allow_downgrade=True))
    out = _ok(site.cli("apply", "--yes"))
    assert site.pair(DNF_NODE) == (old, old), out
    assert _transactions(site) == before + 1  # both packages in one dnf transaction
    last = site.bed.run(DNF_NODE, "dnf -q history info last", check=True).stdout
    assert last.count("Downgrade") >= 2 and DRIVER in last and FM in last, last
    assert site.bed.run(DNF_NODE, "dnf -q versionlock list", check=True).stdout.split() == [f"{DRIVER}-0:{old}.*"]
    assert "no changes" in _ok(site.cli("plan"))
