"""Node-side faults injected into `reconciler apply` on the testbed (issue 22), at seeded random points.

Each injection: the payload's next version goes into the desired state, `apply` starts, the fault hits one node
after a random delay (or before the apply, where the fault is a state: a full disk, a stopped daemon), the
fault ends, and the cluster must converge. Counted for the README table: injections, recoveries, payload files
neither the old nor the new version (must be 0), sentinel jobs killed (must be 0), seconds from the fault's end to
a clean plan.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from tests.faults.bed import COMPUTES, PAYLOAD, PAYLOAD_DIR, FaultBed, payload_text, wait_until
from tests.faults.record import FaultTally

pytestmark = pytest.mark.testbed
REBOOT = "kill -KILL $(ps -eo pid= | awk '$1 != 1 && $1 != '$$' {print $1}') 2>/dev/null; true"
APPLY_WINDOW = 2.5  # seconds after the apply starts within which the fault lands (an apply takes ~2-4 s here)


def _finish(bed: FaultBed, tally: FaultTally, fault_end: float, old: int, new: int, sentinels: list[str],
            note: str = "") -> None:
    """After the fault: count torn files now, converge, count again, count killed jobs."""
    torn = bed.torn({old, new})
    converged = bed.converge()
    seconds = None if converged is None else time.monotonic() - fault_end
    torn += bed.torn({new})
    killed = bed.killed(sentinels)
    tally.injection(recovered=converged is not None and bed.versions() == dict.fromkeys(COMPUTES, new),
                    converge_s=seconds, torn_files=torn, jobs_killed=killed, note=note)


def _during_apply(bed: FaultBed, rng: random.Random, inject: Callable[[], None]) -> str:
    """Start an apply, inject after a random delay inside its window, wait for the apply; its output."""
    proc = bed.apply_process()
    time.sleep(rng.uniform(0.0, APPLY_WINDOW))
    inject()
    out, _ = proc.communicate(timeout=300)
    return out


def _assert_clean(tally: FaultTally) -> None:
    assert tally.injected > 0
    assert tally.torn_files == 0, tally
    assert tally.jobs_killed == 0, tally
    assert tally.recovered == tally.injected, tally


def test_sshd_killed_mid_apply(fbed: FaultBed, rng: random.Random, repeats: Callable[[int, int], int],
                               tally: Callable[[str], FaultTally]) -> None:
    """sshd (and every session it holds) killed on a node while the apply writes: the node is reported, the
    others converge; supervisord restarts sshd and the next apply converges."""
    record = tally("sshd killed on a node mid-apply")
    fbed.start_sentinels(COMPUTES)
    for _ in range(repeats(2, 10)):
        node = rng.choice(COMPUTES)
        old, new = fbed.version, fbed.bump()
        _during_apply(fbed, rng, lambda node=node: fbed.exec(node, "pkill -KILL -x sshd; true"))
        assert wait_until(lambda node=node: fbed.exec(node, "pgrep -x sshd").returncode == 0, 30)
        _finish(fbed, record, time.monotonic(), old, new, COMPUTES, note=node)
    _assert_clean(record)


def test_link_cut_mid_apply(fbed: FaultBed, rng: random.Random, repeats: Callable[[int, int], int],
                            tally: Callable[[str], FaultTally]) -> None:
    """A node's link set down inside its namespace mid-apply, up again after a few seconds: the apply reports
    the node and the others get the new payload; after the link is back the next apply converges."""
    record = tally("node link down mid-apply, restored")
    fbed.start_sentinels(COMPUTES)
    for _ in range(repeats(1, 10)):
        node = rng.choice(COMPUTES)
        others = [n for n in COMPUTES if n != node]
        old, new = fbed.version, fbed.bump()
        out = _during_apply(fbed, rng, lambda node=node: fbed.exec(node, "ip link set eth0 down"))
        versions = fbed.versions(others)
        fbed.exec(node, "ip link set eth0 up", check=True)
        ended = time.monotonic()
        assert all(v == new for v in versions.values()), (versions, out[-2000:])
        _finish(fbed, record, ended, old, new, COMPUTES, note=node)
    _assert_clean(record)


def test_disk_full_at_the_target_directory(fbed: FaultBed, rng: random.Random, repeats: Callable[[int, int], int],
                                           tally: Callable[[str], FaultTally]) -> None:
    """The payload's directory on a full tmpfs on one node: the old file stays whole, the error names the node,
    the file and ENOSPC, every other node converges; unmounted, the next apply converges."""
    record = tally("disk full at the target directory")
    fbed.start_sentinels(COMPUTES)
    for _ in range(repeats(1, 10)):
        node = rng.choice(COMPUTES)
        old, new = fbed.version, fbed.bump()
        # a 64 KiB tmpfs over the directory holding a copy of the old file, the rest filled up
        fbed.exec(node, f"cp {PAYLOAD} /tmp/payload.old && mount -t tmpfs -o size=256k tmpfs {PAYLOAD_DIR} && "
                        f"cp /tmp/payload.old {PAYLOAD} && (dd if=/dev/zero of={PAYLOAD_DIR}/fill bs=4k 2>/dev/null;"
                        " true)", check=True)
        try:
            result = fbed.cli("apply", str(fbed.desired), "--yes")
            text = result.stdout + result.stderr
            assert result.returncode != 0, text[-2000:]
            line = next((ln for ln in text.splitlines() if node in ln and "No space left on device" in ln), "")
            assert PAYLOAD in text and line, text[-3000:]
            assert fbed.exec(node, f"cat {PAYLOAD}").stdout == payload_text(old)
            others = {n: v for n, v in fbed.versions().items() if n != node}
            assert all(v == new for v in others.values()), others
            torn_now = fbed.torn({old, new})
        finally:
            fbed.exec(node, f"umount {PAYLOAD_DIR}", check=True)
        ended = time.monotonic()
        _finish(fbed, record, ended, old, new, COMPUTES, note=node)
        record.torn_files += torn_now
    _assert_clean(record)


def test_slurmctld_stopped_when_a_reconfigure_is_due(fbed: FaultBed, rng: random.Random,
                                                     repeats: Callable[[int, int], int],
                                                     tally: Callable[[str], FaultTally]) -> None:
    """slurm.conf changes (MaxTime) while slurmctld is stopped: the files are written whole, the missed
    reconfigure is reported; slurmctld started again reads the new file and the cluster converges."""
    record = tally("slurmctld stopped when a reconfigure is due")
    for _ in range(repeats(1, 10)):
        old, new = fbed.version, fbed.bump(edit_cluster=True)
        fbed.exec("ctl", "supervisorctl stop slurmctld", check=True)
        try:
            result = fbed.cli("apply", str(fbed.desired), "--yes")
            text = result.stdout + result.stderr
            assert result.returncode != 0 and ("slurmctld" in text or "scontrol" in text), text[-2000:]
            torn = fbed.torn({old, new})
        finally:
            fbed.exec("ctl", "supervisorctl start slurmctld", check=True)
        ended = time.monotonic()
        assert wait_until(lambda: fbed.exec("ctl", "scontrol ping").returncode == 0, 60)
        _finish(fbed, record, ended, old, new, [])
        record.torn_files += torn
        maxtime = fbed.exec("ctl", "scontrol show partition batch").stdout
        assert f"MaxTime=04:{new % 60:02d}:00" in maxtime, maxtime
    _assert_clean(record)


def test_munge_stopped_on_a_node(fbed: FaultBed, rng: random.Random, repeats: Callable[[int, int], int],
                                 tally: Callable[[str], FaultTally]) -> None:
    """munged stopped on one node across an apply with a reconfigure: the others converge; with munged back,
    the node answers Slurm again and the next apply converges; no job is killed."""
    record = tally("munge stopped on a node")
    fbed.start_sentinels(COMPUTES)
    for _ in range(repeats(1, 10)):
        node = rng.choice(COMPUTES)
        old, new = fbed.version, fbed.bump(edit_cluster=True)
        fbed.exec(node, "supervisorctl stop munge", check=True)
        try:
            fbed.cli("apply", str(fbed.desired), "--yes")
            others = {n: v for n, v in fbed.versions().items() if n != node}
            assert all(v == new for v in others.values()), others
        finally:
            fbed.exec(node, "supervisorctl start munge", check=True)
        ended = time.monotonic()
        assert wait_until(lambda node=node: fbed.exec("ctl", f"srun -w {node} -N1 --immediate=20 true").returncode
                          == 0, 90)
        _finish(fbed, record, ended, old, new, COMPUTES, note=node)
    _assert_clean(record)


def test_node_rebooted_while_facts_are_gathered(fbed: FaultBed, rng: random.Random,
                                                repeats: Callable[[int, int], int],
                                                tally: Callable[[str], FaultTally]) -> None:
    """Every process of a node but its init killed (a reboot: supervisord starts sshd, munged, slurmd again)
    while the apply gathers facts and writes: the others converge, the node converges after it is back, and
    the sentinel jobs on the other nodes still run (the rebooted node's own job is lost, as on a real reboot)."""
    record = tally("node rebooted during an apply (CLI)")
    for _ in range(repeats(1, 10)):
        node = rng.choice(COMPUTES)
        others = [n for n in COMPUTES if n != node]
        fbed.start_sentinels(others)
        running = [n for n in others if fbed.job_running(n)]  # a job still pending when the node fell is not counted
        old, new = fbed.version, fbed.bump()
        _during_apply(fbed, rng, lambda node=node: fbed.exec(node, REBOOT))
        assert wait_until(lambda node=node: fbed.exec(node, "pgrep -x sshd && pgrep -x slurmd").returncode == 0, 60)
        ended = time.monotonic()
        fbed.exec("ctl", f"scontrol update nodename={node} state=resume", check=False)
        _finish(fbed, record, ended, old, new, running, note=node)
        fbed.jobs.pop(node, None)
    _assert_clean(record)


def test_payload_is_whole_everywhere_at_the_end(fbed: FaultBed) -> None:
    """After every fault: the payload is the last version on every compute node and nothing is left drained."""
    assert fbed.versions() == dict.fromkeys(COMPUTES, fbed.version)
    assert fbed.plan_clean()
