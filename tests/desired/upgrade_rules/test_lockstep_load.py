"""NVIDIA lockstep and Slurm order at validate: a load error at the file:line of the offending package, naming
both versions and the rule; nothing loads. Lockstep-consistent states load."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.desired.upgrade_rules import branch_agrees, nvidia_family, upstream
from tests.drivers.base_state import write_state


def errors(tmp_path: Path, yaml: str) -> list[str]:
    """`file:line key.path: message` of each load error of the base state plus YAML ([] when it loads)."""
    root = write_state(tmp_path / "repo", yaml)
    try:
        load_dir(root)
    except DesiredStateError as exc:
        return [f"{e.location.file}:{e.location.line} {e.key_path()}: {e.message}" for e in exc.errors
                if e.location]
    return []


MISMATCH = """\
packages:
  - nodes: "gpu[01-02]"
    packages:
      nvidia-driver-570: {version: "570.86.15-0ubuntu1", needs: reboot}
      nvidia-fabricmanager-570: "570.86.10-1"
      libnvidia-nscq-570: "570.86.15-1"
"""


def test_fabric_manager_mismatch_names_its_line_and_both_versions(tmp_path: Path) -> None:
    """The fabric manager one patch behind the driver: one error, at its own line, both versions, the rule."""
    got = errors(tmp_path, MISMATCH)
    assert len(got) == 1, got
    assert got[0].startswith("files.yaml:5 packages[0].packages.nvidia-fabricmanager-570: "), got
    assert "570.86.10-1" in got[0] and "570.86.15-0ubuntu1" in got[0] and "nvidia-lockstep" in got[0], got
    assert "packages[0].packages.nvidia-driver-570" in got[0], got  # where the other version is


def test_mismatch_across_entries_of_one_node(tmp_path: Path) -> None:
    """Driver by hostlist, NSCQ by role in another entry: they meet on gpu01 and must agree there."""
    yaml = ('packages:\n  - nodes: gpu01\n    packages:\n      nvidia-driver-standin: "570.86.15-1"\n'
            '  - roles: [compute]\n    packages:\n      libnvidia-nscq-standin: "550.127.05-1"\n')
    got = errors(tmp_path, yaml)
    assert len(got) == 1 and got[0].startswith("files.yaml:7 packages[1].packages.libnvidia-nscq-standin:"), got
    assert "on gpu01" in got[0] and "550.127.05 ≠ 570.86.15" in got[0], got


def test_entries_on_different_nodes_do_not_meet(tmp_path: Path) -> None:
    """gpu01 at 570 and gpu02 at 550 is a rollout in progress, not a mismatch: each node is in lockstep."""
    yaml = ('packages:\n  - nodes: gpu01\n    packages:\n      nvidia-driver-standin: "570.86.15-1"\n'
            '      nvidia-fabricmanager-standin: "570.86.15-1"\n'
            '  - nodes: gpu02\n    packages:\n      nvidia-driver-standin: "550.127.05-1"\n'
            '      nvidia-fabricmanager-standin: "550.127.05-1"\n')
    assert errors(tmp_path, yaml) == []


@pytest.mark.parametrize("driver, fm, ok", [
    ("570.86.15-1", "570.86.15-1", True),
    ("3:570.86.15-1.el9", "570.86.15-1", True),      # rpm epoch and release are not the upstream version
    ("570.86.15-1", "570.86.15-*", True),            # a glob on the revision only: the same upstream
    ("570.86.*", "570.86.*", True),                  # the same glob
    ("570.86.*", "570.86.15-1", False),              # a glob and a version: not the same glob
    ("570.*", "570.86.*", False),
    ("570.86.15-1", "570.86.150-1", False),
])
def test_versions_and_globs(tmp_path: Path, driver: str, fm: str, ok: bool) -> None:
    """Upstream versions compared without epoch and revision; a glob only equals the same glob."""
    yaml = (f'packages:\n  - nodes: gpu01\n    packages:\n      nvidia-driver: "{driver}"\n'
            f'      nvidia-fabric-manager: "{fm}"\n')
    got = errors(tmp_path, yaml)
    assert (got == []) is ok, got


@pytest.mark.parametrize("name, version, line", [
    ("nvidia-driver-570", "550.127.05-1", "nvidia-driver-570 is the 570 branch but its version is 550.127.05-1"),
    ("cuda-drivers-570", "57.0-1", "cuda-drivers-570 is the 570 branch"),
    ("libnvidia-nscq-550", "5500.1-1", "libnvidia-nscq-550 is the 550 branch"),
    ("nvidia-driver-570-server-open", "4*", "nvidia-driver-570-server-open is the 570 branch"),
])
def test_branch_in_the_name_must_agree(tmp_path: Path, name: str, version: str, line: str) -> None:
    """The branch a package name carries is the version's first component (a glob must be able to match it)."""
    got = errors(tmp_path, f'packages:\n  - nodes: gpu01\n    packages:\n      {name}: "{version}"\n')
    assert len(got) == 1 and got[0].startswith(f"files.yaml:4 packages[0].packages.{name}:"), got
    assert line in got[0] and "nvidia-branch" in got[0], got


def test_hostile_names_and_versions_are_judged_not_crashed(tmp_path: Path) -> None:
    """A branch of 40 digits, a name that only looks NVIDIA's, present/absent, `5*`: judged, never a crash."""
    big = "9" * 40
    yaml = (f'packages:\n  - nodes: gpu01\n    packages:\n      nvidia-driver-{big}: "{big}.1-1"\n'
            f'      nvidia-driver-570x: "1.0-1"\n      nvidia-fabricmanager-{big}: present\n'
            f'      libnvidia-nscq-{big}: absent\n      cuda-drivers-{big}: "9*"\n')
    got = errors(tmp_path, yaml)
    assert len(got) == 1 and got[0].startswith(f"files.yaml:8 packages[0].packages.cuda-drivers-{big}:"), got
    assert "does not match" in got[0] and "9*" in got[0], got


def test_family_and_branch_helpers() -> None:
    """Names of the three families and their branches; other NVIDIA packages are not in the lockstep."""
    assert nvidia_family("nvidia-driver-570-open") == ("driver", "570")
    assert nvidia_family("nvidia-fabricmanager-standin") == ("fabricmanager", None)
    assert nvidia_family("libnvidia-nscq-570") == ("nscq", "570")
    assert nvidia_family("nvidia-utils-570") is None and nvidia_family("nvidia-driver-570x") is None
    assert upstream("3:570.86.15-1.el9") == "570.86.15" and upstream("570.86.*") == "570.86.*"
    assert branch_agrees("570", "570.*") and branch_agrees("570", "5*") and not branch_agrees("570", "55*")
