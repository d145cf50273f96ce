"""The container stand-ins' own parts, without a testbed: enroot's create/start/remove and the Pyxis plugin's build.

The enroot stand-in runs here with real mksquashfs/unsquashfs; the plugin is compiled with the real gcc against
Debian's libslurm-dev headers (skipped, with the reason, where those are missing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTBED = Path(__file__).resolve().parents[2] / "deploy" / "testbed"
ENROOT = TESTBED / "standins" / "enroot"
sys.path.insert(0, str(TESTBED))

import pyxis_standin  # noqa: E402  (deploy/testbed is not a package)


def enroot(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the enroot stand-in with its data under TMP_PATH."""
    env = dict(os.environ, ENROOT_DATA_PATH=str(tmp_path / "data"))
    return subprocess.run([sys.executable, str(ENROOT), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_enroot_standin_creates_starts_and_removes_a_container(tmp_path: Path) -> None:
    if subprocess.run(["sh", "-c", "command -v mksquashfs && command -v unsquashfs"], capture_output=True).returncode:
        pytest.skip("squashfs-tools not installed (deploy/testbed/testbed deps installs it)")
    assert enroot(tmp_path, "import", "-o", "img.sqsh", "docker://nvcr.io#nvidia/pytorch:24.04-py3").returncode == 0
    assert enroot(tmp_path, "create", "--name", "c1", "img.sqsh").returncode == 0
    assert (tmp_path / "data/c1/etc/enroot-standin-uri").read_text() == "docker://nvcr.io#nvidia/pytorch:24.04-py3\n"
    again = enroot(tmp_path, "create", "--name", "c1", "img.sqsh")
    assert again.returncode == 1 and f"[ERROR] File already exists: {tmp_path}/data/c1" in again.stderr
    started = enroot(tmp_path, "start", "c1", "sh", "-c", "echo started")
    assert started.returncode == 0 and started.stdout == "started\n"
    assert enroot(tmp_path, "remove", "--force", "c1").returncode == 0 and not (tmp_path / "data/c1").exists()
    gone = enroot(tmp_path, "start", "c1", "true")
    assert gone.returncode == 1 and "[ERROR] No such file or directory:" in gone.stderr
    missing = enroot(tmp_path, "create", "/shared/images/never-imported.sqsh")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "[ERROR] No such file or directory: /shared/images/never-imported.sqsh"
    (tmp_path / "bad.sqsh").write_text("not a squashfs\n")
    bad = enroot(tmp_path, "create", "bad.sqsh")
    assert bad.returncode == 1 and "[ERROR] Failed to extract squashfs filesystem: bad.sqsh" in bad.stderr


def test_pyxis_standin_builds_a_spank_plugin_once(tmp_path: Path) -> None:
    plugin, why = pyxis_standin.build(tmp_path)
    if plugin is None:
        pytest.skip(why)
    assert plugin[:4] == b"\x7fELF"
    (cached,) = tmp_path.glob("pyxis-standin-*.so")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(cached)], capture_output=True, text=True).stdout
    assert "spank_options" in symbols and "slurm_spank_user_init" in symbols and "plugin_name" in symbols
    files = pyxis_standin.files(tmp_path)
    assert set(files) == {"usr/lib/reconciler-testbed/pyxis-standin.so",
                          "usr/lib/reconciler-testbed/pyxis-standin-start"}
