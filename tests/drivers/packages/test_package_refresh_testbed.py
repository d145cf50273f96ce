"""A repository added in the same commit as a package only it offers converges in ONE apply, on the testbed (real
apt/dpkg and Debian's real dnf/rpm over real SSH; the testbed's second repository `extra/` on ctl, which no node
is configured for, signed with a key of its own: apt's Release and the rpm itself, dnf with gpgcheck=1):

apt on gpu[01-02] (a sources file and its key under /etc/apt/keyrings), dnf on gpu03 (a repo file and its key
under /etc/pki/rpm-gpg): the plan says the refresh will run and why, and refreshes nothing itself; one apply
writes the files, refreshes (`apt-get update`, `dnf makecache --refresh`), installs; the next plan is empty.
Then cache_valid_time: metadata made 2 h old on one node of each manager is refreshed, the others' (fresh) not;
the plan after that is empty again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.drivers.packages.testbed_desired import DNF_NODE, with_dnf_node
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[3]
PACKAGE = "reconciler-extra-standin"
APT_NODES = ["gpu01", "gpu02"]
APT_KEY, SOURCES = "/etc/apt/keyrings/reconciler-extra.asc", "/etc/apt/sources.list.d/reconciler-extra.sources"
RPM_KEY, YUM = "/etc/pki/rpm-gpg/RPM-GPG-KEY-reconciler-extra", "/etc/yum.repos.d/reconciler-extra.repo"
APT_STAMPS = "/var/lib/apt/periodic/update-success-stamp /var/lib/apt/lists"
DNF_STAMP = "/var/cache/dnf/last_makecache"


@dataclass
class Site:
    """The testbed, a desired-state copy, the extra repository's manifest."""

    bed: Testbed
    desired: Path
    extra: dict

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The reconciler CLI on the desired state."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, str(self.desired)],
                              capture_output=True, text=True, timeout=600, cwd=REPO)

    def version(self, node: str) -> str:
        """NODE's installed version of PACKAGE by its package manager ('' when not installed)."""
        if node == DNF_NODE:
            rpm = self.bed.run(node, f"rpm -q --qf '%{{VERSION}}-%{{RELEASE}}' {PACKAGE}")
            return rpm.stdout if rpm.returncode == 0 else ""
        out = self.bed.run(node, f"dpkg-query -W -f '${{db:Status-Status}}|${{Version}}' {PACKAGE}").stdout
        return out.split("|", 1)[1] if out.startswith("installed|") else ""

    def mtimes(self, node: str, paths: str) -> str:
        """The mtimes of PATHS on NODE (what the metadata's age is read from)."""
        return self.bed.run(node, f"stat -c '%n %Y' {paths} 2>/dev/null", check=False).stdout


def _ok(proc: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert proc.returncode == code, f"exit {proc.returncode}, wanted {code}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _indent(text: str) -> str:
    return "".join(f"      {line}\n" for line in text.splitlines())


@pytest.fixture(scope="module")
def site(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Site:
    bed = testbed_factory(nodes=3, packages=True)
    desired = with_dnf_node(bed, tmp_path_factory.mktemp("refresh") / "desired")
    extra = bed.package_manifest["extra"]
    assert extra["deb"]["standin"][PACKAGE] and extra["rpm"]["standin"][PACKAGE]
    return Site(bed=bed, desired=desired, extra=extra)


def _commit(site: Site, cache_valid_time: bool = False) -> None:
    """The commit: the extra repository and its key for both managers, and the package only it offers."""
    key = Path(site.extra["key"]).read_text()
    sources = f"Types: deb\nURIs: {site.extra['deb']['url']}/\nSuites: ./\nSigned-By: {APT_KEY}\n"
    yum = (f"[reconciler-extra]\nname=reconciler testbed extra (stand-ins)\nbaseurl={site.extra['rpm']['url']}/\n"
           f"enabled=1\ngpgcheck=1\ngpgkey=file://{RPM_KEY}\nrepo_gpgcheck=0\n")
    files = "files:\n"
    for path, nodes, content in ((APT_KEY, "gpu[01-02]", key), (SOURCES, "gpu[01-02]", sources),
                                 (RPM_KEY, DNF_NODE, key), (YUM, DNF_NODE, yum)):
        files += f"  - path: {path}\n    nodes: \"{nodes}\"\n    content: |\n{_indent(content)}"
    (site.desired / "extra-repository.yaml").write_text(files)
    packages = f'packages:\n  - nodes: "gpu[01-03]"\n    packages: {{{PACKAGE}: present}}\n'
    if cache_valid_time:
        packages += '  - nodes: "gpu[01-03]"\n    cache_valid_time: 3600\n    packages: {hello: absent}\n'
    (site.desired / "packages.yaml").write_text(packages)


def test_01_repository_key_and_package_in_one_commit_converge_in_one_apply(site: Site) -> None:
    assert all(site.version(n) == "" for n in [*APT_NODES, DNF_NODE])
    _commit(site)
    text = _ok(site.cli("plan"), 2)
    assert "runs `apt-get update` on gpu[01-02]" in text and "runs `dnf makecache` on gpu03" in text, text
    assert f"{SOURCES} added" in text and f"{YUM} added" in text, text
    assert text.count(f"install {PACKAGE} (the newest version offered after the refresh)") == 1, text  # folded
    # the plan refreshed nothing: apt does not know the package, dnf has no cache of the new repository
    assert site.bed.run("gpu01", f"apt-cache madison {PACKAGE}").stdout.strip() == ""
    assert "reconciler-extra" not in site.bed.run(DNF_NODE, "ls /var/cache/dnf").stdout

    out = _ok(site.cli("apply", "--yes"))
    want = {n: site.extra["deb" if n in APT_NODES else "rpm"]["standin"][PACKAGE][-1] for n in [*APT_NODES, DNF_NODE]}
    assert {n: site.version(n) for n in want} == want, out
    # the rpm's signature was checked against the managed key (dnf imported it into the rpm database)
    assert "gpg-pubkey" in site.bed.run(DNF_NODE, "rpm -q gpg-pubkey", check=True).stdout
    assert "no changes" in _ok(site.cli("plan"))


def test_02_stale_metadata_refreshed_fresh_left_alone(site: Site) -> None:
    _commit(site, cache_valid_time=True)
    assert "no changes" in _ok(site.cli("plan"))  # every node refreshed by test_01's apply: fresh
    site.bed.run("gpu01", f"mkdir -p /var/lib/apt/periodic && touch {APT_STAMPS.split()[0]} && "
                 f"touch -d '2 hours ago' {APT_STAMPS}", check=True)
    site.bed.run(DNF_NODE, f"touch -d '2 hours ago' {DNF_STAMP}", check=True)
    fresh = site.mtimes("gpu02", APT_STAMPS)
    text = _ok(site.cli("plan"), 2)
    then = text.split("\nThen:\n", 1)[1].split("\nRollout:", 1)[0]
    assert "runs `apt-get update` on gpu01\n" in then and "runs `dnf makecache` on gpu03\n" in then, text
    assert "gpu02" not in then and "gpu[01-02]" not in then, text  # gpu02's metadata is fresh
    assert "the metadata is 2 h old, older than packages[1] cache_valid_time: 3600" in text, text
    _ok(site.cli("apply", "--yes"))
    assert site.mtimes("gpu02", APT_STAMPS) == fresh  # not refreshed
    now = int(site.bed.run("gpu01", "date +%s", check=True).stdout)
    for node, stamp in (("gpu01", APT_STAMPS.split()[0]), (DNF_NODE, DNF_STAMP)):
        assert now - int(site.mtimes(node, stamp).split()[-1]) < 300, (node, site.mtimes(node, stamp))
    assert "no changes" in _ok(site.cli("plan"))
