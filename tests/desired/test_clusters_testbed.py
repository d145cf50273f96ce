"""Two testbeds as two clusters of one repository (issue 37): an override changes only its cluster's plan, a
change to the shared base plans on both.

bases/common is testbed A's own desired state (as `testbed up` wrote it); clusters/a takes it as it is;
clusters/b takes it too, reaches testbed B (its `ssh:` files and cluster name) and overrides the debug
partition's MaxTime. Real sshd and Slurm on both beds; `reconciler plan` as a user runs it, never applying.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.desired_fixtures import REPO
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed


def _plan(root: Path, cluster: str) -> str:
    """`reconciler plan ROOT --cluster CLUSTER --limit ctl`'s output (exit 0 or 2: planned, every node reached)."""
    proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "plan", str(root), "--cluster", cluster,
                           "--limit", "ctl"], capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    return proc.stdout


def _debug_changes(plan: str) -> list[str]:
    """The diff lines of the plan that remove or add the debug partition's slurm.conf line."""
    return [line.strip() for line in plan.splitlines() if line.strip()[:1] in "+-"
            and line.strip()[1:].lstrip().startswith("PartitionName=debug")]


def test_an_override_plans_on_its_cluster_only_and_a_base_change_on_both(
        testbed_factory: Callable[..., Testbed], tmp_path: Path) -> None:
    bed_a, bed_b = testbed_factory(nodes=1), testbed_factory(nodes=1)
    root = tmp_path / "repo"
    shutil.copytree(bed_a.desired_state, root / "bases" / "common")
    for name in ("a", "b"):
        (root / "clusters" / name).mkdir(parents=True)
        (root / "clusters" / name / "overlay.yaml").write_text("bases: [common]\n")
    (root / "clusters" / "a" / "cluster.yaml").write_text(f'cluster:\n  name: "{bed_a.name}"\n')
    (root / "clusters" / "b" / "cluster.yaml").write_text(
        f'cluster:\n  name: "{bed_b.name}"\n  partitions:\n    - name: debug\n      MaxTime: "12:00:00"\n')
    (root / "clusters" / "b" / "ssh.yaml").write_text(
        f'ssh:\n  config: "{bed_b.ssh_config}"\n  known_hosts: "{bed_b.known_hosts}"\n'
        f'  identity_file: "{bed_b.identity}"\n')
    validated = subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", str(root)], capture_output=True,
                               text=True, timeout=120, cwd=REPO, check=False)
    assert validated.returncode == 0, validated.stdout + validated.stderr

    plan_a, plan_b = _plan(root, "a"), _plan(root, "b")
    assert _debug_changes(plan_a) == [], plan_a  # the running debug partition is what the base says
    assert any("MaxTime=12:00:00" in line for line in _debug_changes(plan_b) if line.startswith("+")), plan_b
    assert any("MaxTime=UNLIMITED" in line or "MaxTime=INFINITE" in line
               for line in _debug_changes(plan_b) if line.startswith("-")), plan_b
    assert "MaxJobCount" not in plan_a + plan_b
    # each plan read its own bed: the running ClusterName is the cluster's (B's plan through B's ssh_config)
    assert "-ClusterName=" not in plan_a + plan_b and "+ClusterName=" not in plan_a + plan_b

    cluster_yaml = root / "bases" / "common" / "cluster.yaml"
    text = cluster_yaml.read_text()
    assert text.count("  slurm_conf:\n") == 1
    cluster_yaml.write_text(text.replace("  slurm_conf:\n", "  slurm_conf:\n    MaxJobCount: 12345\n"))
    for name, plan in (("a", _plan(root, "a")), ("b", _plan(root, "b"))):
        assert any(line.strip().startswith("+") and "MaxJobCount=12345" in line for line in plan.splitlines()), \
            (name, plan)
