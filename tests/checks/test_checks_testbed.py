"""Health checks on the testbed: node checks over real SSH, the all_reduce_perf stand-in through real srun.

Must show (issue 6): the stand-in launched through real `srun` on real slurmd; the degraded node ends drained
with a `reconciler:` reason and is resumed once the healthy replay passes; a node drained by hand stays
drained. Plus node checks: munge/slurmd running, a mount check failing with a clear message.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.checks import store
from reconciler.checks.runner import check_run
from reconciler.desired.loader import LoadedState, load_dir
from reconciler.transport.ssh import SSHTransport
from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]

CHECKS = """\
checks:
  node:
    - name: daemons
      nodes: "gpu[01-03]"
      services: [munge, slurmd]
      slurm_state: [IDLE, MIXED, ALLOCATED]
    - name: storage
      nodes: gpu01
      mounts: [/shared, /scratch]
    - name: gpus
      nodes: gpu01
      gpus: {count: 8, model: H200}
      drain_on_fail: false
    - name: gpu-health
      nodes: "gpu[01-03]"
      interval: 1m
      gpus: {count: 8, model: H200, driver: "580.", max_temperature: 85, pcie: {gen: 5, width: 16}, ecc: true,
             nvlinks: 18}
  nccl:
    - name: nccl-single
      nodes: "gpu[01-03]"
      mpi: pmi2
      ntasks_per_node: 8
      gpus_per_task: 1
      args: ["-b", "1G", "-e", "8G", "-f", "2", "-g", "1"]
      timeout: 2m
      thresholds: {min_busbw: 330, at_size: 1G}
    - name: nccl-pairs
      mode: pairs
      partition: debug
      mpi: pmi2
      ntasks_per_node: 8
      gpus_per_task: 1
      args: ["-b", "1G", "-e", "8G", "-f", "2", "-g", "1"]
      timeout: 2m
      thresholds: {min_busbw: 330, at_size: 1G}
"""


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def bed(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed]) -> Iterator[Testbed]:
    """A testbed of each Slurm release with 3 compute nodes (each with the all_reduce_perf stand-in); it goes
    down after its release's tests."""
    testbed = testbed_factory(nodes=3, slurm=request.param)
    for node in testbed.computes:  # `up` waits for sinfo; supervisord may still say STARTING for a second
        wait = "for i in $(seq 100); do supervisorctl status slurmd | grep -q RUNNING && exit 0; sleep 0.1; done; exit 1"
        testbed.run(node, wait, check=True)
    yield testbed
    testbed.down()


@pytest.fixture(scope="module")
def desired(bed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The testbed's desired state with our checks instead of its own."""
    directory = tmp_path_factory.mktemp("checks") / "desired"
    shutil.copytree(bed.desired_state, directory)
    (directory / "checks.yaml").write_text(CHECKS)
    return directory


@pytest.fixture
def run(desired: Path, tmp_path: Path) -> Iterator[Callable[..., object]]:
    """run(names, act=True) -> CheckRun, over real SSH, recording into one SQLite file per test."""
    loaded: LoadedState = load_dir(desired)
    conn = sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    transport = SSHTransport(loaded.state.ssh, Path(loaded.root))
    lines: list[str] = []

    def go(*names: str, act: bool = True) -> object:
        return check_run(loaded, transport, conn, list(names), None, lines.append, act=act)

    go.conn = conn  # type: ignore[attr-defined]
    go.log = lines  # type: ignore[attr-defined]
    yield go
    transport.close()
    conn.close()


def slurm_node(bed: Testbed, node: str) -> str:
    """`State=... Reason=...` of a node (the rest of its scontrol line left out)."""
    line = bed.run("ctl", f"scontrol show node {node} -o", check=True).stdout
    state = re.search(r" State=\S+", line)
    reason = re.search(r" Reason=.*?\](?= |$)", line)
    return (state.group(0) if state else "") + (reason.group(0) if reason else "") + " "


def settled(bed: Testbed, node: str, timeout: float = 15) -> str:
    """slurm_node once the NOT_RESPONDING that follows a resume (slurmctld pings the node) has passed; the
    Reason left out unless the node is drained."""
    end = time.monotonic() + timeout
    while "NOT_RESPONDING" in (seen := slurm_node(bed, node)) and time.monotonic() < end:
        time.sleep(0.2)
    state = re.match(r" State=\S+", seen)
    # Slurm 24.11 without accounting storage (this testbed) keeps the last Reason on a resumed node (State=IDLE,
    # no DRAIN flag; `reason=` does not clear it); 22.05 clears it. Drained or not is the state's flags on both.
    return seen if state is None or "DRAIN" in state.group(0) else state.group(0) + " "


def slurm_job(bed: Testbed, job: str) -> str:
    return bed.run("ctl", f"scontrol show job {job} -o", check=True).stdout


def test_node_checks_services_state_mounts_and_gpus(bed: Testbed, run: Callable[..., object]) -> None:
    bed.run("gpu01", "mkdir -p /scratch && mount -t tmpfs -o ro tmpfs /scratch", check=True)
    try:
        outcome = run("daemons", "storage", "gpus")
        results = {(r.check, r.node): r for r in outcome.results}  # type: ignore[attr-defined]
        for node in ("gpu01", "gpu02", "gpu03"):
            daemons = results[("daemons", node)]
            assert daemons.ok and daemons.message == "munge running, slurmd running, slurm IDLE"
        storage = results[("storage", "gpu01")]
        assert storage.failed
        assert storage.message == "mount /shared: not mounted; mount /scratch: not writable: Read-only file system"
        gpus = results[("gpus", "gpu01")]  # the testbed's STAND-IN nvidia-smi replays a recorded H200
        assert gpus.ok and gpus.message.startswith("8x NVIDIA H200 (driver 580.159.04), no fatal XID this boot")
        # storage drains gpu01 under its own reason
        assert "Reason=reconciler: check storage: mount /shared: not mounted; mount /scratch: not writable" \
            in slurm_node(bed, "gpu01")

        bed.run("gpu01", "mkdir -p /shared && mount -t tmpfs tmpfs /shared && mount -o remount,rw /scratch", check=True)
        outcome = run("storage")
        [storage] = outcome.results  # type: ignore[attr-defined]
        assert storage.ok and storage.message == "/shared writable (tmpfs tmpfs), /scratch writable (tmpfs tmpfs)"
        assert [(a.node, a.kind, a.done) for a in outcome.actions] == [("gpu01", "resume", True)]  # type: ignore[attr-defined]
        assert settled(bed, "gpu01") == " State=IDLE "
    finally:
        bed.run("gpu01", "umount /scratch; umount /shared; scontrol update nodename=gpu01 state=resume; true")


def test_degraded_node_drained_then_resumed_manual_drain_kept(bed: Testbed, run: Callable[..., object]) -> None:
    bed.run("gpu02", "mkdir -p /etc/reconciler-standin && touch /etc/reconciler-standin/degraded", check=True)
    bed.run("ctl", "scontrol update nodename=gpu03 state=drain reason=maintenance", check=True)
    try:
        first = run("nccl-single")
        results = {r.node: r for r in first.results}  # type: ignore[attr-defined]
        assert {n: r.status for n, r in results.items()} == {"gpu01": "PASS", "gpu02": "FAIL", "gpu03": "SKIP"}
        assert results["gpu03"].message == "skipped: drained (maintenance)"
        for node in ("gpu01", "gpu02"):  # real srun, real slurmd: the job ran on that node
            job = slurm_job(bed, results[node].job_id)
            assert "JobName=reconciler-nccl-nccl-single " in job and f" NodeList={node} " in job
            assert f"job {results[node].job_id} step 0: rank 0 on {node}" in results[node].details
            assert f"nccl-tests ranks on {node}" in results[node].details  # the stand-in's Rank lines
            assert results[node].gpu_seconds > 0
        assert results["gpu01"].value == pytest.approx(363.5125)
        assert results["gpu02"].message == "nccl all_reduce busbw 118.6 < 330 GB/s"
        assert "State=IDLE+DRAIN " in slurm_node(bed, "gpu02")
        assert "Reason=reconciler: nccl nccl-single: all_reduce busbw 118.6 < 330 GB/s [root@" in slurm_node(bed, "gpu02")
        assert "Reason=maintenance [root@" in slurm_node(bed, "gpu03")

        bed.run("gpu02", "rm /etc/reconciler-standin/degraded", check=True)
        second = run("nccl-single")
        results = {r.node: r for r in second.results}  # type: ignore[attr-defined]
        assert {n: r.status for n, r in results.items()} == {"gpu01": "PASS", "gpu02": "PASS", "gpu03": "SKIP"}
        assert " NodeList=gpu02 " in slurm_job(bed, results["gpu02"].job_id)
        [srun] = [line for line in run.log if "--nodelist=gpu02" in line and "srun" in line][-1:]  # type: ignore[attr-defined]
        assert " --reservation=reconciler-nccl-single-" in srun  # retested inside the maintenance reservation
        assert settled(bed, "gpu02") == " State=IDLE "
        assert "Reason=maintenance [root@" in slurm_node(bed, "gpu03") and "DRAIN" in slurm_node(bed, "gpu03")
        assert "No reservations in the system" in bed.run("ctl", "scontrol show reservation").stdout
        assert [(a.node, a.kind) for a in second.actions] == [("gpu02", "resume")]  # type: ignore[attr-defined]
        conn = run.conn  # type: ignore[attr-defined]
        assert store.history(conn, "nccl-single", "gpu01") == [pytest.approx(363.5125)] * 2
        assert {(r.node, r.ok) for r in store.latest(conn)} == {("gpu01", True), ("gpu02", True)}
    finally:
        bed.run("gpu02", "rm -f /etc/reconciler-standin/degraded")
        bed.run("ctl", "scontrol update nodename=gpu02,gpu03 state=resume; true")


GPU_FAULTS = "/etc/reconciler-standin/gpu-faults"


def plant(bed: Testbed, node: str, faults: str) -> None:
    """Make NODE's stand-in nvidia-smi and dmesg replay these faults ('' for the healthy recording)."""
    bed.run(node, f"mkdir -p /etc/reconciler-standin && printf '%s' '{faults}' > {GPU_FAULTS}", check=True)


def test_gpu_xid_79_drains_with_its_reason_then_healthy_replay_resumes(bed: Testbed, run: Callable[..., object],
                                                                       desired: Path, tmp_path: Path) -> None:
    """Issue 23: the stand-in replays an XID 79 on gpu02's GPU 3: gpu02 is drained `reconciler: gpu 3 xid 79
    (fallen off the bus)` by the next check, the others stay up, a human's drain on gpu03 is untouched; the healthy
    replay resumes gpu02."""
    bed.run("ctl", "scontrol update nodename=gpu03 state=drain reason='fan noise, ticket 42'", check=True)
    try:
        first = run("gpu-health")
        assert {r.node: r.status for r in first.results} == {f"gpu0{i}": "PASS" for i in (1, 2, 3)}  # type: ignore[attr-defined]
        assert first.actions == []  # type: ignore[attr-defined]

        plant(bed, "gpu02", "xid79 3\n")
        faulty = run("gpu-health")
        results = {r.node: r for r in faulty.results}  # type: ignore[attr-defined]
        assert results["gpu01"].ok and results["gpu03"].ok
        assert results["gpu02"].failed
        assert results["gpu02"].message.startswith("gpu 3 xid 79 (fallen off the bus); gpus: found 7, expected 8")
        assert [(a.node, a.kind, a.reason, a.done) for a in faulty.actions] == [  # type: ignore[attr-defined]
            ("gpu02", "drain", "reconciler: gpu 3 xid 79 (fallen off the bus)", True)]
        assert "Reason=reconciler: gpu 3 xid 79 (fallen off the bus) [root@" in slurm_node(bed, "gpu02")
        assert "DRAIN" not in slurm_node(bed, "gpu01")
        assert "Reason=fan noise, ticket 42 [root@" in slurm_node(bed, "gpu03")

        again = run("gpu-health")  # still in this boot's kernel log: stays drained, nothing new done
        assert [(a.node, a.kind) for a in again.actions] == [("gpu02", "keep")]  # type: ignore[attr-defined]

        plant(bed, "gpu02", "")
        healed = run("gpu-health")
        assert {r.node: r.status for r in healed.results} == {f"gpu0{i}": "PASS" for i in (1, 2, 3)}  # type: ignore[attr-defined]
        assert [(a.node, a.kind, a.done) for a in healed.actions] == [("gpu02", "resume", True)]  # type: ignore[attr-defined]
        assert settled(bed, "gpu02") == " State=IDLE "
        assert "Reason=fan noise, ticket 42 [root@" in slurm_node(bed, "gpu03") and "DRAIN" in slurm_node(bed, "gpu03")

        # a double-bit ECC XID with every GPU still there: drained until the admin, having reset the GPU,
        # acknowledges it with `reconciler check --ack-xid` (the CLI, on the same results database)
        plant(bed, "gpu02", "xid 2 48\n")
        dbe = run("gpu-health")
        assert [(a.node, a.kind, a.reason) for a in dbe.actions] == [  # type: ignore[attr-defined]
            ("gpu02", "drain", "reconciler: gpu 2 xid 48 (double bit ECC error)")]
        proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "check", str(desired), "gpu-health",
                               "--nodes", "gpu02", "--state-db", str(tmp_path / "state.db"), "--ack-xid", "gpu02"],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "gpu02: XIDs acknowledged up to " in proc.stderr
        assert proc.stdout.splitlines()[0].startswith("PASS  node gpu-health gpu02: 8x NVIDIA H200")
        assert "resume gpu02 - gpu-health passed" in proc.stdout
        assert settled(bed, "gpu02") == " State=IDLE "
    finally:
        plant(bed, "gpu02", "")
        bed.run("ctl", "scontrol update nodename=gpu02,gpu03 state=resume; true")


def test_gpu_faults_each_drain_with_gpu_and_kind_and_old_driver_passes(bed: Testbed,
                                                                        run: Callable[..., object]) -> None:
    """Planted ECC, row-remap, slowdown, PCIe and NVLink faults through SSH and the real probe; an old driver's
    field names (the stand-in refusing clocks_event_reasons.*) still pass."""
    cases = [("ecc 2 4", "gpu 2 ecc 4 uncorrected errors since the last reset"),
             ("remap 5", "gpu 5 row-remap pending (reset the GPU)"),
             ("slowdown 1", "gpu 1 clocks held down: hw-slowdown, hw-thermal-slowdown"),
             ("pcie 6 8", "gpu 6 pcie gen5 x8, expected gen5 x16"),
             ("nvlink 7 2", "gpu 7 nvlink 16 of 18 links up (2 inactive)")]
    try:
        for fault, message in cases:
            plant(bed, "gpu01", fault + "\n")
            outcome = run("gpu-health", act=False)
            [result] = [r for r in outcome.results if r.node == "gpu01"]  # type: ignore[attr-defined]
            assert result.message == message
            assert [(a.node, a.kind, a.reason) for a in outcome.actions] == [  # type: ignore[attr-defined]
                ("gpu01", "drain", f"reconciler: {message}")]
        plant(bed, "gpu01", "old-driver\n")
        outcome = run("gpu-health", act=False)
        assert all(r.ok for r in outcome.results)  # type: ignore[attr-defined]
        assert outcome.actions == []  # type: ignore[attr-defined]
    finally:
        plant(bed, "gpu01", "")


def test_cli_pairs_through_srun_over_two_nodes(bed: Testbed, desired: Path, tmp_path: Path) -> None:
    bed.run("ctl", "scontrol update nodename=gpu03 state=drain reason=maintenance", check=True)
    try:
        proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "check", str(desired), "nccl-pairs",
                               "--state-db", str(tmp_path / "db.sqlite")],
                              capture_output=True, text=True, cwd=REPO, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0] == "SKIP  nccl nccl-pairs gpu03: skipped: drained (maintenance)"
        assert lines[1].startswith("PASS  nccl nccl-pairs gpu01: all_reduce busbw 363.5 GB/s at >= 1 GiB (min 330)")
        assert lines[2].startswith("PASS  nccl nccl-pairs gpu02: ")
        assert "GPU-s]" in lines[1]
        assert lines[-1] == "3 result(s): 0 failed, 1 skipped"
        assert "--nodes=2 '--nodelist=gpu[01-02]'" in proc.stderr  # one srun over the pair
        [latest] = [r for r in store.latest(sqlite3.connect(str(tmp_path / "db.sqlite"))) if r.node == "gpu01"]
        job = slurm_job(bed, latest.job_id or "")
        assert " NodeList=gpu[01-02] " in job and " NumNodes=2 " in job
        assert "nccl-tests ranks on gpu01,gpu02" in latest.details
    finally:
        bed.run("ctl", "scontrol update nodename=gpu03 state=resume; true")
