"""Dangerous targets (issue 22): refused when they can only brick a node, warned (file:line, PR comment) otherwise."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.desired.risks import risk_warnings
from reconciler.desired.targets import SYSTEM_DIRS, VIRTUAL_FS, wildcard_host
from reconciler.drivers import all_drivers
from reconciler.engine.context import Context
from reconciler.engine.planner import make_plan
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_planning import PrPlan
from tests.drivers.operations.test_operations import converged_facts

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "desired-state"
MOUNT = "    - source: nfs01:/export/home\n      mountpoint: /home\n"


def _copy(tmp: Path) -> Path:
    root = tmp / "state"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("examples"))
    return root


def _mount_at(root: Path, mountpoint: str) -> int:
    path = root / "storage.yaml"
    text = path.read_text()
    assert MOUNT in text
    path.write_text(text.replace(MOUNT, MOUNT.replace("mountpoint: /home\n", f"mountpoint: {mountpoint}\n")))
    return text.splitlines().index("      mountpoint: /home") + 1


def _add_file(root: Path, path: str, mode: str = "0644") -> Path:
    target = root / "zz-files.yaml"
    target.write_text(f"files:\n  - path: {path}\n    nodes: dgx01\n    mode: '{mode}'\n    content: x\n")
    return target


@pytest.mark.parametrize("mountpoint", sorted(SYSTEM_DIRS))
def test_mount_over_a_system_directory_is_refused(tmp_path: Path, mountpoint: str) -> None:
    """A mount over /, /etc, /usr, /var, /boot, /proc, /sys, /dev, /run (and the like): an error at its line."""
    root = _copy(tmp_path)
    line = _mount_at(root, mountpoint)
    with pytest.raises(DesiredStateError) as caught:
        load_dir(root)
    hits = [e for e in caught.value.errors if "hides a system directory" in e.message]
    assert hits and str(hits[0].location).startswith(f"storage.yaml:{line}:")


@given(st.sampled_from(VIRTUAL_FS), st.lists(st.sampled_from(["sys", "kernel", "x", "cpu0", "shm"]), max_size=3))
def test_managed_file_under_a_kernel_file_system_is_refused(tmp_path_factory: pytest.TempPathFactory, fs: str,
                                                             parts: list[str]) -> None:
    """files: under /proc, /sys or /dev, at any depth: refused at the file's line."""
    root = _copy(tmp_path_factory.mktemp("vfs"))
    path = "/".join([fs, *parts])
    _add_file(root, path)
    with pytest.raises(DesiredStateError) as caught:
        load_dir(root)
    hits = [e for e in caught.value.errors if "kernel file system" in e.message]
    assert hits and str(hits[0].location).startswith("zz-files.yaml:2:")


@pytest.mark.parametrize(("mode", "word"), [("4755", "setuid"), ("2755", "setgid"), ("6755", "setuid and setgid"),
                                            ("0666", "world-writable")])
def test_special_modes_are_risk_warnings(tmp_path: Path, mode: str, word: str) -> None:
    """setuid/setgid and world-writable files load, with a warning at the mode's line."""
    root = _copy(tmp_path)
    _add_file(root, "/usr/local/bin/tool", mode)
    warnings = [str(w) for w in risk_warnings(load_dir(root))]
    assert any(w.startswith("zz-files.yaml:4:") and word in w for w in warnings), warnings


def test_mount_over_a_managed_file_and_lockout_files_warn_and_reach_the_pr_comment(tmp_path: Path) -> None:
    """A mount over a managed file's directory, and a managed sshd_config: warnings in plans and PR comments."""
    root = _copy(tmp_path)
    line = _mount_at(root, "/etc/slurm")
    _add_file(root, "/etc/ssh/sshd_config")
    loaded = load_dir(root)
    warnings = [str(w) for w in risk_warnings(loaded)]
    assert any(w.startswith(f"storage.yaml:{line}:") and "holds managed file(s) /etc/slurm/" in w
               for w in warnings), warnings
    assert any(w.startswith("zz-files.yaml:2:") and "lock out" in w for w in warnings), warnings
    ctx = Context(loaded=loaded, source="test")
    ctx.facts = converged_facts(ctx)
    plan = make_plan(ctx, all_drivers())
    comment = render_pr_comment(PrPlan(number=1, head_sha="a" * 40, head_ref="r", subdir="", status="ok",
                                       main_plan=plan, plan=plan))
    assert "**Warnings**" in comment and "/etc/slurm" in comment and "sshd_config" in comment


def test_ordinary_targets_stay_quiet(tmp_path: Path) -> None:
    """The example state (mounts at /home and /shared, ordinary files): no target warning, no refusal."""
    root = _copy(tmp_path)
    warnings = [str(w) for w in risk_warnings(load_dir(root))]
    assert not [w for w in warnings if "mount over" in w or "setuid" in w or "lock out" in w], warnings


EXPORTS = "  exports:\n"


def _export(root: Path, path: str, clients: str = "[10.0.0.0/24]", options: str = "[rw, sync]") -> int:
    """Add an export of PATH on nfs01 as the first one; the line of its `path:` key."""
    target = root / "storage.yaml"
    text = target.read_text()
    assert text.count(EXPORTS) == 1
    entry = f"    - server: nfs01\n      path: {path}\n      clients: {clients}\n      options: {options}\n"
    target.write_text(text.replace(EXPORTS, EXPORTS + entry))
    return text.splitlines().index(EXPORTS.rstrip("\n")) + 3


@pytest.mark.parametrize("path", [*sorted(SYSTEM_DIRS), "/proc/fs/nfsd", "/sys/kernel", "/dev/shm",
                                  "/root/.ssh", "/etc/pam.d/sub", "/etc/sudoers.d"])
def test_export_of_a_system_directory_is_refused(tmp_path: Path, path: str) -> None:
    """exports: the mounts' list of system directories, the kernel file systems and the login directories: an
    error at the export's path line, and the state does not load."""
    root = _copy(tmp_path)
    line = _export(root, path)
    with pytest.raises(DesiredStateError) as caught:
        load_dir(root)
    hits = [e for e in caught.value.errors if "(refused)" in e.message and path in e.message]
    assert hits, [str(e) for e in caught.value.errors]
    assert str(hits[0].location).startswith(f"storage.yaml:{line}:"), str(hits[0])
    assert hits[0].path == ("storage", "exports", 0, "path")


def test_risky_exports_warn_at_their_lines_and_reach_the_pr_comment(tmp_path: Path) -> None:
    """An export under /etc holding managed files, and no_root_squash to a host wildcard or a wide network: loaded,
    with warnings at file:line that the plan and the PR comment carry."""
    root = _copy(tmp_path)
    _export(root, "/srv/wide", clients="['*.example.com', 10.0.0.0/8]", options="[rw, no_root_squash]")
    line = _export(root, "/etc/slurm")
    loaded = load_dir(root)
    warnings = [str(w) for w in risk_warnings(loaded)]
    assert any(w.startswith(f"storage.yaml:{line}:") and "part of /etc" in w for w in warnings), warnings
    assert any(w.startswith(f"storage.yaml:{line}:") and "holds managed file(s) /etc/slurm/" in w
               and "can change them" in w for w in warnings), warnings
    clients = line + 5  # the second export's `clients:` line (the first export takes four lines)
    assert any(w.startswith(f"storage.yaml:{clients}:") and "host wildcard (*.example.com)" in w
               for w in warnings), warnings
    assert any(w.startswith(f"storage.yaml:{clients}:") and "wide network (10.0.0.0/8)" in w
               for w in warnings), warnings
    ctx = Context(loaded=loaded, source="test")
    ctx.facts = converged_facts(ctx)
    plan = make_plan(ctx, all_drivers())
    comment = render_pr_comment(PrPlan(number=1, head_sha="a" * 40, head_ref="r", subdir="", status="ok",
                                       main_plan=plan, plan=plan))
    warned = comment.split("**Warnings**", 1)[1]
    assert "part of /etc" in warned and "*.example.com" in warned and "holds managed file(s)" in warned, comment


def test_ordinary_exports_stay_quiet(tmp_path: Path) -> None:
    """The example's exports (/export/home with no_root_squash to one /24) and a host pattern without
    no_root_squash: no export warning."""
    root = _copy(tmp_path)
    _export(root, "/srv/data", clients="['gpu*', '*.example.com']")
    warnings = [str(w) for w in risk_warnings(load_dir(root))]
    assert not [w for w in warnings if "an export of" in w or "no_root_squash" in w], warnings


@pytest.mark.parametrize(("client", "wildcard"), [("*.example.com", True), ("gpu??", True), ("dgx*", True),
                                                  ("*", False), ("10.0.0.0/8", False), ("@gpus", False),
                                                  ("login01", False)])
def test_wildcard_host_is_a_pattern_of_names_only(client: str, wildcard: bool) -> None:
    """`*` alone and networks are judged as wide networks, netgroups are not patterns: only host patterns count."""
    assert wildcard_host(client) is wildcard
