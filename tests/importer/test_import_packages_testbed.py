"""`reconciler import --packages` of a running testbed (real apt/dpkg on the nodes): versions adopted, nodes folded,
a hold adopted, and the first plan of the imported directory a no-op."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
APT = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Options::=--force-confold"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The reconciler command line."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def installed(testbed: Testbed, node: str, name: str) -> str | None:
    """The version of NAME dpkg has installed on NODE, or None."""
    proc = testbed.run(node, f"dpkg-query -W -f '${{Version}} ${{db:Status-Status}}' {name}")
    version, _, state = proc.stdout.partition(" ")
    return version if proc.returncode == 0 and state == "installed" else None


@pytest.fixture(scope="module")
def imported(testbed_factory: Callable[..., Testbed],
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Testbed, Path, subprocess.CompletedProcess[str]]:
    """A running testbed with its package repository; hello installed on gpu02 only, tzdata held by hand on
    gpu03; then `reconciler import --packages 'tzdata,hello*'` of it, with the testbed's inventory added."""
    testbed = testbed_factory(nodes=3, bare=False, packages=True)
    testbed.wait_idle()
    hello = testbed.package_manifest["deb"]["real"]["hello"][-1]
    testbed.run("gpu02", f"{APT} hello={hello}", check=True, timeout=300)
    testbed.run("gpu03", "apt-mark hold tzdata", check=True)
    out = tmp_path_factory.mktemp("imported") / "state"
    result = cli("import", "ssh://ctl", "--out", str(out), "--ssh-config", str(testbed.ssh_config),
                 "--known-hosts", str(testbed.known_hosts), "--packages", "tzdata,hello*")
    assert result.returncode == 0, result.stdout + result.stderr
    shutil.copy(testbed.desired_state / "nodes.yaml", out / "nodes.yaml")
    return testbed, out, result


def test_installed_versions_are_adopted_and_folded(
        imported: tuple[Testbed, Path, subprocess.CompletedProcess[str]]) -> None:
    testbed, out, _ = imported
    tzdata = installed(testbed, "ctl", "tzdata")
    hello = installed(testbed, "gpu02", "hello")
    assert tzdata and hello and installed(testbed, "gpu01", "hello") is None
    doc = YAML(typ="safe").load((out / "packages.yaml").read_text())
    entries = {e["nodes"]: e["packages"] for e in doc["packages"]}
    assert entries == {"ctl,gpu01": {"tzdata": tzdata},
                       "gpu02": {"tzdata": tzdata, "hello": hello},
                       "gpu03": {"tzdata": {"version": tzdata, "hold": True}}}


def test_first_plan_after_the_import_is_a_no_op(
        imported: tuple[Testbed, Path, subprocess.CompletedProcess[str]]) -> None:
    testbed, out, _ = imported
    listing = "dpkg-query -W -f '${Package} ${Version} ${Status}\\n'"
    before = {node: testbed.run(node, listing, check=True).stdout for node in testbed.nodes}
    result = cli("plan", str(out), "--format", "json", "--per-node")
    assert result.returncode == 0, result.stdout + result.stderr
    plan = json.loads(result.stdout)
    assert [c for c in plan["changes"] if c["action"] != "ok"] == []
    planned = sorted((c["node"], c["resource"]) for c in plan["changes"] if c["driver"] == "packages")
    assert planned == sorted([(n, "package tzdata") for n in testbed.nodes] + [("gpu02", "package hello")])
    assert {node: testbed.run(node, listing, check=True).stdout for node in testbed.nodes} == before


def test_another_version_in_the_imported_file_is_planned(
        imported: tuple[Testbed, Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """The adopted file is what the driver plans from: another tzdata version there is a change on every node."""
    testbed, out, _ = imported
    tzdata = installed(testbed, "ctl", "tzdata")
    other = [v for v in testbed.package_manifest["deb"]["real"]["tzdata"] if v != tzdata][-1]
    changed = tmp_path / "state"
    shutil.copytree(out, changed)
    text = (changed / "packages.yaml").read_text()
    (changed / "packages.yaml").write_text(text.replace(f'"{tzdata}"', f'"{other}"')
                                           .replace("nodes: ctl", "allow_downgrade: true\n    nodes: ctl")
                                           .replace("nodes: gpu", "allow_downgrade: true\n    nodes: gpu"))
    result = cli("plan", str(changed), "--format", "json", "--per-node")
    assert result.returncode == 2, result.stdout + result.stderr
    plan = json.loads(result.stdout)
    changing = sorted(c["node"] for c in plan["changes"] if c["action"] != "ok")
    assert changing == testbed.nodes
    assert all(c["resource"] == "package tzdata" and f"{tzdata} → {other}" in c["summary"]
               for c in plan["changes"] if c["action"] != "ok")


def test_a_pattern_nothing_matches_is_a_warning(
        imported: tuple[Testbed, Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    testbed, _, _ = imported
    out = tmp_path / "state"
    result = cli("import", "ssh://ctl", "--out", str(out), "--ssh-config", str(testbed.ssh_config),
                 "--known-hosts", str(testbed.known_hosts), "--packages", "no-such-package*")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "warning: packages: no node has a package matching 'no-such-package*'" in result.stderr
    assert not (out / "packages.yaml").exists()
