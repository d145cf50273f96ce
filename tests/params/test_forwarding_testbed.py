"""Adding a node where slurmd forwards messages (TreeWidth=2, 7 compute nodes), on both releases.

slurm.conf.5 (NODE CONFIGURATION, 22.05 to 24.11): "All slurmd daemons must know each node in the system to forward
messages in support of hierarchical communications." A 2-node testbed never forwards (TreeWidth defaults to 50), so
the consequence probe cannot see what a slurmd that does not know a node breaks; here a job's step across every
node is launched through a tree of width 2, so slurmds of the old configuration must reach the added node.

One testbed per release, two applies: the cluster of gpu[01-05] with TreeWidth=2, then gpu06 added by the product
(its plan: before 24.11 slurmctld and every slurmd restart, the documents' route; from 24.11 a reconfigure, SchedMD's
FAQ): the job across gpu[01-06] runs. Last, gpu07 is added the way the product did before (slurmctld restarted
alone, the other slurmds left with the file they read at start): the job across gpu[01-07] fails at launch,
"Can't find an address", on both releases.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.params.probe_io import poll, read_files, sh, write_files
from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
ALL = "gpu[01-07]"
KEEP = ("cluster.yaml", "nodes.yaml", "rollout.yaml")  # the Slurm cluster only: no NFS, image or prolog to converge


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The reconciler command line."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def state(bed: Testbed, into: Path, computes: str) -> Path:
    """The testbed's desired state for the compute nodes COMPUTES, with TreeWidth=2 and without the prolog."""
    into.mkdir(parents=True)
    for name in KEEP:
        text = (bed.desired_state / name).read_text().replace(ALL, computes)
        if name == "cluster.yaml":
            assert "  prolog: /etc/slurm/prolog.sh\n" in text and '    SlurmdParameters: "config_overrides"\n' in text
            text = text.replace("  prolog: /etc/slurm/prolog.sh\n", "").replace(
                '    SlurmdParameters: "config_overrides"\n', '    SlurmdParameters: "config_overrides"\n'
                                                            "    TreeWidth: 2\n")
        (into / name).write_text(text)
    return into


def across(bed: Testbed, nodes: str, count: int) -> tuple[int, str]:
    """A one-task-per-node step across NODES, launched through the forwarding tree; (rc, output)."""
    return sh(bed, "ctl", f"timeout 60 srun --immediate=20 -N{count} -w '{nodes}' hostname", timeout=90)


def idle(bed: Testbed, count: int) -> str | None:
    """None once sinfo shows COUNT nodes, all idle; else what it shows (a node of two partitions once)."""
    out = sh(bed, "ctl", "sinfo -h -N -o '%N %t'")[1]
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return None if len(states) == count and set(states.values()) == {"idle"} else out


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def bed(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed]) -> Testbed:
    """7 compute nodes; gpu06 and gpu07 not yet in the cluster (their slurmd stopped)."""
    testbed = testbed_factory(nodes=7, slurm=request.param)
    for node in ("gpu06", "gpu07"):
        testbed.run(node, "supervisorctl stop slurmd", check=True)
    return testbed


def test_an_added_node_is_reachable_through_the_forwarding_tree(bed: Testbed, tmp_path: Path) -> None:
    five = state(bed, tmp_path / "five", "gpu[01-05]")
    result = cli("apply", str(five), "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert poll(lambda: idle(bed, 5), 60) is None
    assert "TreeWidth=2" in sh(bed, "ctl", "scontrol show config | tr -d ' '")[1]
    rc, out = across(bed, "gpu[01-05]", 5)
    assert rc == 0 and out.count("gpu0") == 5, out

    # gpu06 added by the product: the plan says what the documents ask for, and the job across it runs
    six = state(bed, tmp_path / "six", "gpu[01-06]")
    plan = cli("plan", str(six))
    said = plan.stdout + plan.stderr
    assert plan.returncode in (0, 2), said
    if bed.slurm < "24.11":  # slurm.conf.5 22.05-24.05 and scontrol.1 22.05: slurmctld and every slurmd
        assert "restarts slurmctld" in said and "restarts slurmd on gpu[01-05]" in said, said
        assert "nodes added/removed (gpu06) need restarts" in said, said
    else:  # SchedMD's FAQ of 24.11: reconfigure is enough
        assert "runs `scontrol reconfigure`" in said and "restarts slurm" not in said, said
    assert "starts slurmd on gpu06" in said, said
    result = cli("apply", str(six), "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert poll(lambda: idle(bed, 6), 60) is None
    rc, out = across(bed, "gpu[01-06]", 6)
    assert rc == 0 and sorted(out.split()) == [f"gpu0{i}" for i in range(1, 7)], out

    # gpu07 added the old way: files everywhere, slurmctld restarted alone, gpu07's slurmd started
    files = read_files(bed)
    write_files(bed, {name: (text or "").replace("gpu[01-06]", ALL) for name, text in files.items()
                      if name in ("slurm.conf", "gres.conf") and text})
    sh(bed, "ctl", "supervisorctl restart slurmctld")
    sh(bed, "gpu07", "supervisorctl start slurmd")
    assert poll(lambda: idle(bed, 7), 60) is None
    rc, out = across(bed, ALL, 7)
    assert rc != 0 and "Can't find an address" in out and "gpu07" in out, out
