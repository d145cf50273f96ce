"""`reconciler apply` without --previous on a bad commit, with the default progressive rollout (no `rollout:` in
the desired state): the canary's gate fails and the canary gets back what the apply found there, byte for byte,
from the facts its plan read; the drain Slurm set for the failing prolog is resumed; the output names what was
restored. Real Slurm 22.05, sshd and munge on a bare 6-node testbed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.engine.conftest import Bed
from tests.engine.testbed_state import write_state
from tests.rollout.conftest import GOOD_PROLOG
from tests.rollout.test_rollout_testbed import PROLOG, prolog_patch
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.timeout(900)
NODES = [f"gpu{i:02d}" for i in range(1, 7)]


@pytest.fixture(scope="module")
def six(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Bed:
    """A bare 6-node testbed configured by a one-shot apply of a state whose slurm.conf runs the prolog."""
    testbed = testbed_factory(nodes=6, bare=True)
    desired = write_state(tmp_path_factory.mktemp("desired"), name="rtone", state_dir=testbed.state_dir,
                          subnet=testbed.subnet, computes="gpu[01-06]")
    cluster = desired / "cluster.yaml"
    cluster.write_text(cluster.read_text().replace("    SlurmdParameters: config_overrides\n",
                                                   "    SlurmdParameters: config_overrides\n"
                                                   "    Prolog: /etc/slurm/prolog.sh\n"))
    (desired / "rollout.yaml").unlink()  # the default rollout: canary 1, 50%, 100%, smoke-job gate
    bed = Bed(testbed=testbed, desired=desired)
    first = bed.cli("apply", str(desired), "--yes", "--waves", "all", timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    testbed.wait_idle(timeout=120)
    return bed


def on_all(bed: Bed, command: str) -> dict[str, str]:
    """COMMAND's stdout on every compute node."""
    return {n: bed.exec(n, command, check=False).stdout.strip() for n in NODES}


def test_apply_without_previous_restores_the_canary_from_its_before_image(six: Bed, tmp_path: Path) -> None:
    good = six.desired
    in_sync = six.cli("plan", str(good))
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr
    assert set(on_all(six, f"cat {PROLOG}").values()) == {GOOD_PROLOG.strip()}
    image = on_all(six, f"sha256sum {PROLOG} && stat -c '%a %U %G %s' {PROLOG}")
    stamps = on_all(six, f"stat -c '%.9Y %i' {PROLOG}")
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    (bad / "patches.yaml").write_text(prolog_patch("#!/bin/sh\necho no >&2\nexit 1")(
        (bad / "patches.yaml").read_text()))

    out = six.cli("apply", str(bad), "--yes", timeout=800)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "rollout rolled-back: wave 1: smoke-job gate failed" in out.stdout, text
    assert "no last good commit" not in text and "NOT restored" not in text, text
    size = len(GOOD_PROLOG)
    assert ("restored to the state the apply found (no --previous):\n"
            f"  gpu01: {PROLOG} back to its {size} bytes before the apply, mode 0755 root:root\n"
            "  gpu01: resumed (drained during the rollout)\n") in out.stdout, text
    assert "rolled back" not in out.stdout.replace("rollout rolled-back", ""), text

    # The canary has its old script back, byte for byte, mode and owner too; no other node was touched.
    assert on_all(six, f"sha256sum {PROLOG} && stat -c '%a %U %G %s' {PROLOG}") == image
    after = on_all(six, f"stat -c '%.9Y %i' {PROLOG}")
    assert {n: after[n] for n in NODES[1:]} == {n: stamps[n] for n in NODES[1:]}
    assert after["gpu01"] != stamps["gpu01"]  # it was written (the bad script), then restored
    # Slurm drained the canary for its prolog error; it is resumed and every node takes a job.
    assert six.exec("ctl", "sinfo -h -N -R -o '%N|%E'", check=False).stdout.strip() == ""
    srun = six.exec("ctl", f"timeout 120 srun -N{len(NODES)} --immediate=60 true", check=False)
    assert srun.returncode == 0, srun.stderr
    # The cluster is the good state again.
    again = six.cli("plan", str(good))
    assert again.returncode == 0, again.stdout + again.stderr
