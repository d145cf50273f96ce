"""The NCCL gate and the smoke job's container start, on the rollout package's 16-node testbed with real Slurm.

A real `reconciler run` daemon rolls real commits out in waves (canary gpu[01-02]: the NCCL gate needs two nodes).
Stand-ins, named as such (deploy/testbed/README.md): `all_reduce_perf` replays a recorded nccl-tests run on 8x H200
(degraded: the same run at a third of the bandwidth, on a node holding /etc/reconciler-standin/degraded), and
Pyxis is a small SPANK plugin compiled at `testbed up` that starts `--container-image` through the enroot
stand-in before the tasks run. Slurm, srun, SPANK, sshd, Git and SQLite are the real ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon.harness import DaemonProcess
from tests.rollout.conftest import COMPUTES, ROLLOUT, RolloutBed
from tests.rollout.test_rollout_testbed import rolled_back, rollouts_of

pytestmark = pytest.mark.timeout(1500)
PLUGIN = "/usr/lib/reconciler-testbed/pyxis-standin.so"
UNAVAILABLE = "/usr/lib/reconciler-testbed/pyxis-standin.unavailable"
MANAGED = "/etc/rollout-gates.conf"
GOOD_IMAGE = "/shared/images/pytorch-24.04.sqsh"  # the desired state's `images:` entry, imported into the export
BAD_IMAGE = "/shared/images/pytorch-24.05.sqsh"  # never imported: enroot cannot create a container from it
DEGRADED = "/etc/reconciler-standin/degraded"
GATES = """\
checks:
  nccl:
    - name: gate-nccl
      nodes: gpu[01-16]
      mpi: pmi2
      ntasks_per_node: 1
      gpus_per_task: 1
      timeout: 2m
      thresholds: {{min_busbw: 330, at_size: 1G}}
files:
  - path: /etc/slurm/plugstack.conf
    nodes: "ctl,gpu[01-16]"
    content: |
      required {plugin}
  - path: {managed}
    nodes: gpu[01-16]
    content: |
      version = {version}
"""


def rollout(image: str | None) -> str:
    """rollout.yaml: canary of two, the NCCL gate on, the smoke job starting IMAGE (none: no container)."""
    smoke = f"    smoke_image: {image}\n" if image else ""
    return ("rollout:\n  canary: 2\n  steps: [\"50%\", \"100%\"]\n  soak: 2s\n  gates:\n    timeout: 90s\n"
            f"    nccl: true\n{smoke}")


def commit(rbed: RolloutBed, message: str, version: int, image: str | None) -> str:
    """Push a commit: the gates' files at VERSION, the rollout with IMAGE."""
    gates = GATES.format(plugin=PLUGIN, managed=MANAGED, version=version)
    return rbed.remote.commit(message, {"gates.yaml": lambda _: gates, "rollout.yaml": lambda _: rollout(image)})


def gates_of(done: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Every wave's result of gate NAME in a rollout record."""
    return [g for wave in done["timeline"] for g in wave["gates"] if g["gate"] == name]


@pytest.fixture(scope="module")
def daemon(rbed: RolloutBed) -> Iterator[DaemonProcess]:
    """This module's daemon (the only one on the cluster), on a desired state with the NCCL gate and Pyxis."""
    why = rbed.exec("gpu01", f"cat {UNAVAILABLE} 2>/dev/null", check=False).strip()
    if why or rbed.bed.exec("gpu01", f"test -e {PLUGIN}", check=False).returncode != 0:
        pytest.skip(why or f"{PLUGIN} is not on the testbed nodes")
    for running in rbed.started:
        running.stop()
    assert rbed.exec("gpu01", f"test -s {GOOD_IMAGE} && echo present").strip() == "present"
    running = rbed.daemon()
    running.wait_applied(rbed.remote.head(), timeout=300)
    try:
        # Pyxis (stand-in) enabled everywhere first: srun on ctl must know --container-image before a gate uses it.
        base = commit(rbed, "NCCL gate and the Pyxis stand-in", 1, None)
        running.wait_applied(base, timeout=600)
        yield running
    finally:
        for node in COMPUTES:
            rbed.exec(node, f"rm -f {DEGRADED}", check=False)
        (rbed.remote.work / "gates.yaml").unlink(missing_ok=True)
        back = rbed.remote.commit("no NCCL gate, no smoke image", {"rollout.yaml": lambda _: ROLLOUT})
        running.wait_applied(back, timeout=600)
        for node in ["ctl", *COMPUTES]:  # files a commit stops managing stay: these were only this module's
            rbed.exec(node, f"rm -f /etc/slurm/plugstack.conf {MANAGED}", check=False)
        running.stop()


def test_nccl_gate_passes_on_healthy_waves(rbed: RolloutBed, daemon: DaemonProcess) -> None:
    (done,) = rollouts_of(daemon, rbed.remote.head())
    assert done["status"] == "complete", done
    nccl = gates_of(done, "nccl")
    assert nccl and all(g["ok"] and not g["skipped"] for g in nccl), nccl
    assert all("NCCL result(s) passed" in g["message"] for g in nccl), nccl
    assert set(rbed.on_all(f"cat {MANAGED}").values()) == {"version = 1"}


def test_an_image_that_starts_passes_the_smoke_gate(rbed: RolloutBed, daemon: DaemonProcess) -> None:
    good = commit(rbed, "smoke job starts the pytorch image", 2, GOOD_IMAGE)
    daemon.wait_applied(good, timeout=600)
    (done,) = rollouts_of(daemon, good)
    assert done["status"] == "complete", done
    smoke = gates_of(done, "smoke-job")
    assert len(smoke) == 3 and all(g["ok"] for g in smoke), smoke
    assert smoke[0]["message"].startswith("smoke job passed on gpu[01-02]"), smoke
    assert set(rbed.on_all(f"cat {MANAGED}").values()) == {"version = 2"}


def test_an_image_that_does_not_start_fails_the_smoke_gate_naming_it(rbed: RolloutBed,
                                                                     daemon: DaemonProcess) -> None:
    before = rbed.on_all(f"cat {MANAGED}")
    bad = commit(rbed, "smoke image that was never imported", 3, BAD_IMAGE)
    record = rolled_back(daemon, bad, timeout=400)
    assert record["gate"] == "smoke-job" and record["nodes"] == "gpu[01-02]", record
    assert f"container image {BAD_IMAGE} did not start: [ERROR] No such file or directory: {BAD_IMAGE}" \
        in record["message"], record
    assert rbed.on_all(f"cat {MANAGED}") == before  # the canary back on the previous commit, no one else touched
    assert rbed.drained() == {}
    srun = rbed.bed.exec("ctl", f"timeout 60 srun -N2 -w gpu[01-02] --immediate=30 --container-image={GOOD_IMAGE} "
                         "true", check=False)
    assert srun.returncode == 0, srun.stderr


def test_a_canary_below_the_nccl_threshold_is_rolled_back(rbed: RolloutBed, daemon: DaemonProcess) -> None:
    before = rbed.on_all(f"cat {MANAGED}")
    rbed.exec("gpu02", f"mkdir -p {DEGRADED.rsplit('/', 1)[0]} && touch {DEGRADED}")  # its fabric degrades
    try:
        bad = commit(rbed, "a change landing on a degraded node", 4, GOOD_IMAGE)
        record = rolled_back(daemon, bad, timeout=400)
    finally:
        rbed.exec("gpu02", f"rm -f {DEGRADED}")
    assert record["gate"] == "nccl" and record["nodes"] == "gpu02" and record["wave"] == 1, record
    assert "NCCL check gate-nccl failed on gpu02: " in record["message"] and "120.5 < 330" in record["message"], record
    (done,) = rollouts_of(daemon, bad)
    smoke = gates_of(done, "smoke-job")
    assert [g["ok"] for g in smoke] == [True], smoke  # the smoke job passed: the NCCL gate is what failed
    assert rbed.on_all(f"cat {MANAGED}") == before
    assert record["reverted"] == "gpu[01-02]", record
    assert rbed.drained() == {}  # the gate only decides: nothing drained, nothing left drained
