"""A resumed node's old Reason (issue 43, item 11), on the testbed on both releases: real slurmctld, real `scontrol`.

Observed: Slurm 24.11 (24.11.5, no accounting storage) keeps the last drain's Reason on a node resumed since
(`State=IDLE Reason=... [root@...]`); 22.05 clears it. The product reads a Reason only while the state is one it
explains (scontrol.1: DOWN, DRAINED, DRAINING, FAILING, FAIL), so on both releases the facts of a resumed node say
no reason; a node still drained keeps its reason. Before, `reconciler facts` (and every reader of the Slurm view)
showed the 24.11 node idle with the reason of a drain nobody held; the decisions that read a reason (checks,
rollout drains, upgrade steps, node-state driver) all asked for the DRAIN flag first, so none acted on it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
REASON = "reconciler: upgrade c0ffee failed: gpu gate: xid 79"


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def bed(testbed_factory: Callable[..., Testbed], request: pytest.FixtureRequest) -> Testbed:
    """2 compute nodes of each Slurm release."""
    testbed = testbed_factory(nodes=2, slurm=request.param)
    testbed.wait_idle(timeout=120)
    return testbed


def node_line(bed: Testbed, node: str) -> str:
    """`scontrol show node -o` of NODE."""
    return bed.run("ctl", f"scontrol show node -o {node}", check=True).stdout


def test_a_resumed_nodes_old_reason_is_not_read_as_a_drain(bed: Testbed) -> None:
    bed.run("ctl", f"scontrol update nodename=gpu[01-02] state=drain reason='{REASON}'", check=True)
    bed.run("ctl", "scontrol update nodename=gpu01 state=resume", check=True)
    deadline = time.monotonic() + 30
    while "DRAIN" in (line := node_line(bed, "gpu01")) and time.monotonic() < deadline:
        time.sleep(0.2)
    state = re.search(r" State=(\S+)", line)
    assert state and "DRAIN" not in state.group(1), line
    kept = re.search(r" Reason=(.*)", line)
    if bed.slurm == "24.11":  # what the product must cope with (it is why this test exists)
        assert kept and kept.group(1).startswith(REASON), line
    else:
        assert kept is None, line
    out = subprocess.run([sys.executable, "-m", "reconciler.cli", "facts", str(bed.desired_state), "--node",
                          "gpu[01-02]"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    nodes = json.loads(out.stdout)["slurm_nodes"]
    assert nodes["gpu01"]["reason"] is None and "DRAIN" not in nodes["gpu01"]["state"], nodes["gpu01"]
    assert nodes["gpu02"]["reason"] == REASON and "DRAIN" in nodes["gpu02"]["state"], nodes["gpu02"]
    bed.run("ctl", "scontrol update nodename=gpu02 state=resume", check=True)
