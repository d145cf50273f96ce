"""Driver stand-in (issue 34, item 4): the stand-in nvidia-smi reports the driver LOADED at the node's last boot
(or stand-in driver reload), not the one installed since; the broken 570 shows XID 79 to the GPU check after the
reboot. Real apt/dpkg from the testbed's repository, a real reboot of the node (deploy/testbed/reboot.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.testbed_fixture import Testbed, _testbed_cli

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y --allow-downgrades"
RECORDED = "580.159.04"  # the recorded H200's driver: what the stand-in reports with no driver stand-in loaded
LOCKSTEP = ("nvidia-driver-standin", "nvidia-fabricmanager-standin", "libnvidia-nscq-standin")
CHECKS = """\
checks:
  node:
    - name: gpu-health
      nodes: "gpu[01-02]"
      gpus: {{count: 8, model: H200, driver: "{driver}"}}
"""


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A 2-node testbed with the package repository."""
    testbed = testbed_factory(nodes=2, packages=True)
    testbed.wait_idle()
    return testbed


def driver(bed: Testbed, node: str) -> set[str]:
    """The driver versions nvidia-smi reports on NODE (one per GPU it finds)."""
    out = bed.run(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout
    return set(out.split())


def install(bed: Testbed, node: str, version: str) -> None:
    """The driver, fabric manager and NSCQ stand-ins at VERSION, together (they depend on the exact driver)."""
    bed.run(node, f"{APT} install " + " ".join(f"{p}={version}" for p in LOCKSTEP), check=True, timeout=300)


def reboot(bed: Testbed, node: str) -> None:
    """`testbed reboot NODE`."""
    proc = _testbed_cli("reboot", "--name", bed.name, node, timeout=180)
    assert proc.returncode == 0, proc.stderr


def check(bed: Testbed, directory: Path, want: str) -> subprocess.CompletedProcess[str]:
    """`reconciler check --no-act` of a GPU check expecting driver WANT, over real SSH."""
    (directory / "checks.yaml").write_text(CHECKS.format(driver=want))
    return subprocess.run([sys.executable, "-m", "reconciler.cli", "check", str(directory), "gpu-health", "--no-act"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_manifest_names_the_lockstep_standins_and_the_broken_version(bed: Testbed) -> None:
    """Driver, fabric manager and NSCQ stand-ins at both versions, and the broken one, in deb and rpm."""
    m = bed.package_manifest
    for kind in ("deb", "rpm"):
        assert set(m[kind]["standin"]) == set(LOCKSTEP)
        assert set(m[kind]["standin_broken"]) == set(LOCKSTEP)
    broken = m["deb"]["standin_broken"]["nvidia-driver-standin"]
    assert broken not in m["deb"]["standin"]["nvidia-driver-standin"]
    assert m["standin_driver"]["broken_faults"] == "xid79 0"


def test_installed_driver_shows_only_after_reboot(bed: Testbed) -> None:
    """550 installed: still the recorded driver until the reboot; 570 installed: still 550 until the next."""
    old, new = bed.package_manifest["deb"]["standin"]["nvidia-driver-standin"]
    assert driver(bed, "gpu01") == {RECORDED}
    install(bed, "gpu01", old)
    assert driver(bed, "gpu01") == {RECORDED}  # installed, not loaded
    reboot(bed, "gpu01")
    assert driver(bed, "gpu01") == {old.split("-")[0]}
    install(bed, "gpu01", new)
    assert driver(bed, "gpu01") == {old.split("-")[0]}
    assert f"Module for x86_64  {old.split('-')[0]}" in bed.run("gpu01", "dmesg", check=True).stdout
    reboot(bed, "gpu01")
    assert driver(bed, "gpu01") == {new.split("-")[0]}
    assert driver(bed, "gpu02") == {RECORDED}  # the other node untouched


def test_driver_reload_loads_the_installed_driver(bed: Testbed) -> None:
    """The stand-in driver reload (modprobe -r && modprobe nvidia-standin) loads what is installed now."""
    old = bed.package_manifest["deb"]["standin"]["nvidia-driver-standin"][0]
    install(bed, "gpu02", old)
    assert driver(bed, "gpu02") == {RECORDED}
    bed.run("gpu02", "modprobe -r nvidia-standin && modprobe nvidia-standin", check=True)
    assert driver(bed, "gpu02") == {old.split("-")[0]}


def test_broken_570_shows_xid_79_to_the_gpu_check_after_the_reboot(bed: Testbed, tmp_path: Path) -> None:
    """The broken version installs quietly; after the reboot GPU 0 has fallen off the bus: nvidia-smi finds 7,
    dmesg has the XID 79 line, and the GPU check fails gpu01 for it (gpu02 passes)."""
    m = bed.package_manifest
    new = m["deb"]["standin"]["nvidia-driver-standin"][1]
    broken = m["deb"]["standin_broken"]["nvidia-driver-standin"]
    directory = tmp_path / "desired"
    shutil.copytree(bed.desired_state, directory)
    install(bed, "gpu02", new)  # gpu02 on the good 570, loaded by its reboot: it passes
    reboot(bed, "gpu02")
    install(bed, "gpu01", broken)
    assert bed.run("gpu01", "nvidia-smi -L").stdout.count("GPU ") == 8  # not loaded yet
    reboot(bed, "gpu01")
    smi = bed.run("gpu01", "nvidia-smi --query-gpu=index --format=csv,noheader")
    assert smi.returncode == 15 and len(smi.stdout.split()) == 7
    assert "Unable to determine the device handle" in smi.stderr
    assert "NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus." in bed.run("gpu01", "dmesg").stdout
    result = check(bed, directory, new.split("-")[0])
    assert result.returncode == 2, result.stdout + result.stderr
    status = {m.group(2): (m.group(1), m.group(3)) for m in re.finditer(r"^(\w+)\s+\w+\s+gpu-health (gpu\d+): (.*)$",
                                                                        result.stdout, re.M)}
    assert status["gpu01"][0] == "FAIL" and "gpu pci 0000:00:06 xid 79 (fallen off the bus); gpus: found 7" in status["gpu01"][1], result.stdout
    assert status["gpu02"][0] == "PASS", result.stdout
