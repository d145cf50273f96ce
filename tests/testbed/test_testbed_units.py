"""Parts of the testbed that need neither root nor namespaces: desired-state generator and stand-ins."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import ipaddress
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests import testbed_fixture

TESTBED_DIR = Path(__file__).resolve().parents[2] / "deploy" / "testbed"
STANDINS = TESTBED_DIR / "standins"


def load(name: str, path: Path) -> ModuleType:
    """Import a file of deploy/testbed as a module (the stand-ins have no .py suffix)."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@dataclass
class FakeLayout:
    """The attributes desired_state.write reads from testbed.Layout."""

    name: str
    subnet: str
    compute_nodes: list[str]
    desired_state: Path
    ssh_config: Path
    known_hosts: Path
    identity: Path


@pytest.mark.parametrize("computes", [1, 4, 64])
def test_generated_desired_state_validates(tmp_path: Path, computes: int) -> None:
    loader = pytest.importorskip("reconciler.desired.loader")
    desired_state = load("testbed_desired_state", TESTBED_DIR / "desired_state.py")
    names = [f"gpu{i:02d}" for i in range(1, computes + 1)]
    layout = FakeLayout("tbunit", "10.250.7", names, tmp_path / "desired-state", tmp_path / "ssh_config",
                        tmp_path / "known_hosts", tmp_path / "id_ed25519")
    out = desired_state.write(layout, cpus=16, memory_mb=64000, gpus=8)
    state = loader.load_dir(out).state
    assert state.cluster.name == "tbunit" and state.cluster.slurm_version == "22.05"
    assert [p.name for p in state.cluster.partitions] == ["debug", "batch"]
    assert state.cluster.node_sets[0].cpus == 16 and state.cluster.node_sets[0].gpus.count == 8
    assert state.cluster.gres.lines[0].file == "/dev/nvidia[0-7]"
    assert state.ssh.config == str(tmp_path / "ssh_config")
    assert state.ssh.service_manager.type == "supervisord"
    assert state.storage.exports[0].clients == ["10.250.7.0/24"]
    assert state.images[0].path == "/shared/images/pytorch-24.04.sqsh" and state.images[0].import_on == "ctl"
    assert {p.name for p in state.patches} == {"prolog", "rxdm-ubuntu-2204"}


def test_fixture_skips_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in (testbed_fixture.unavailable() or "")


# ------------------------------------------------------------------------------------------ enroot stand-in


def enroot(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the enroot stand-in from the source tree."""
    return subprocess.run([sys.executable, str(STANDINS / "enroot"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


@pytest.mark.parametrize("uri", [
    "docker://nvcr.io#nvidia/pytorch:24.04-py3",
    "docker://ubuntu",
    "docker://user@registry.example.org:5000#team/image:v1.2",
    "dockerd://ubuntu:22.04",
])
def test_enroot_standin_accepts_what_enroot_accepts(tmp_path: Path, uri: str) -> None:
    if not shutil.which("mksquashfs"):
        pytest.skip("mksquashfs missing")
    proc = enroot("import", "-o", "out.sqsh", uri, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.sqsh").read_bytes()[:4] == b"hsqs"
    again = enroot("import", "-o", "out.sqsh", uri, cwd=tmp_path)
    assert again.returncode == 1 and f"[ERROR] File already exists: {tmp_path / 'out.sqsh'}" in again.stderr


@pytest.mark.parametrize("uri,message", [
    ("docker://nvcr.io#nvidia/PyTorch:24.04", "[ERROR] Invalid image reference: docker://nvcr.io#nvidia/PyTorch"),
    ("docker://nvcr.io#nvidia/pytorch:24 04", "[ERROR] Invalid image reference"),
    ("docker://", "[ERROR] Invalid image reference"),
    ("nvcr.io/nvidia/pytorch:24.04-py3", "[ERROR] Invalid argument: nvcr.io/nvidia/pytorch:24.04-py3"),
])
def test_enroot_standin_rejects_bad_uris(tmp_path: Path, uri: str, message: str) -> None:
    proc = enroot("import", "-o", "bad.sqsh", uri, cwd=tmp_path)
    assert proc.returncode == 1 and message in proc.stderr
    assert not (tmp_path / "bad.sqsh").exists()


def test_enroot_standin_default_file_name(tmp_path: Path) -> None:
    if not shutil.which("mksquashfs"):
        pytest.skip("mksquashfs missing")
    proc = enroot("import", "docker://nvcr.io#nvidia/pytorch:24.04-py3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "nvidia+pytorch+24.04-py3.sqsh").exists()
    assert enroot("version", cwd=tmp_path).stdout.strip()
    assert enroot("list", cwd=tmp_path).returncode == 0


# ------------------------------------------------------------------------------------------ mount.nfs stand-in


@pytest.fixture()
def mount_nfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The mount.nfs stand-in as a module, with a fake client identity."""
    module = load("mount_nfs_standin", STANDINS / "mount.nfs")
    monkeypatch.setattr(module, "client_ids", lambda: ("gpu01", [ipaddress.IPv4Address("10.9.0.11")]))
    return module


def etab(root: Path, text: str) -> Path:
    """Write a server root whose /var/lib/nfs/etab holds TEXT."""
    (root / "var/lib/nfs").mkdir(parents=True)
    (root / "var/lib/nfs/etab").write_text(text)
    return root


@pytest.mark.parametrize("line,path,ok", [
    ("/srv/shared\t10.9.0.0/24(rw,sync)", "/srv/shared", True),
    ("/srv/shared\t10.9.0.0/24(rw,sync)", "/srv/shared/images", True),
    ("/srv/shared\t10.9.0.0/24(rw,sync)", "/srv/sharedx", False),
    ("/srv/shared\t10.8.0.0/24(rw,sync)", "/srv/shared", False),
    ("/srv/shared\t*(rw)", "/srv/shared", True),
    ("/srv/shared\tgpu*(rw)", "/srv/shared", True),
    ("/srv/shared\tctl(rw)", "/srv/shared", False),
    ("/srv/shared\t10.9.0.11(rw)", "/srv/shared", True),
    ("# /srv/shared *(rw)", "/srv/shared", False),
    ("", "/srv/shared", False),
])
def test_mount_nfs_standin_export_check(mount_nfs: ModuleType, tmp_path: Path, line: str, path: str,
                                        ok: bool) -> None:
    root = etab(tmp_path / "ctl", line + "\n")
    assert mount_nfs.is_exported(str(root), path) is ok


def test_mount_nfs_standin_denies_unexported_path(mount_nfs: ModuleType, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    etab(tmp_path / "roots" / "ctl", "/srv/shared\t*(rw)\n")
    monkeypatch.setattr(mount_nfs, "ROOTS", str(tmp_path / "roots"))
    (tmp_path / "mnt").mkdir()
    with pytest.raises(SystemExit) as exc:
        mount_nfs.do_mount("mount.nfs", ["ctl:/srv/other", str(tmp_path / "mnt"), "-o", "rw"])
    assert exc.value.code == 32
    assert "mount.nfs: access denied by server while mounting ctl:/srv/other" in capsys.readouterr().err
