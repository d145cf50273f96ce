"""Node-side faults injected into `reconciler apply` on the testbed (issue 22), at seeded random points.

Each injection: the payload's next version goes into the desired state, `apply` starts, the fault hits one node at a
random point of a random phase (while the node gathers facts, while its writer runs, or after a random delay within
the apply; see node_helpers), or before the apply where the fault is a state (a full disk, a stopped daemon); the
fault ends and the cluster must converge. Checked every time: a node the apply did not bring to the new version is
named in its output with a non-zero exit (no silent failure), the other nodes converge in the same apply. Counted
for the docs/faults.md table: injections, recoveries, managed files neither the old nor the new version (the payload on
every compute node, and slurm.conf on every node where it changes; must be 0), sentinel jobs killed (must be 0),
seconds from the fault's end to a clean plan.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from tests.faults.bed import COMPUTES, PAYLOAD, PAYLOAD_DIR, FaultBed, payload_text, wait_until
from tests.faults.node_helpers import (
    ALL_PHASES,
    Landing,
    apply_seconds,
    land_during_apply,
    others_new,
    stray_temp_files,
)
from tests.faults.record import FaultTally

pytestmark = pytest.mark.testbed
REBOOT = "kill -KILL $(ps -eo pid= | awk '$1 != 1 && $1 != '$$' {print $1}') 2>/dev/null; true"
SLURM_CONF = "/etc/slurm/slurm.conf"
NODES = ["ctl", *COMPUTES]


def _finish(bed: FaultBed, tally: FaultTally, fault_end: float, old: int, new: int, sentinels: list[str],
            note: str = "", torn_before: int = 0) -> None:
    """After the fault: count torn files now, converge, count again (and stray temp copies), count killed jobs."""
    torn = torn_before + bed.torn({old, new})
    converged = bed.converge()
    seconds = None if converged is None else time.monotonic() - fault_end
    torn += bed.torn({new})
    strays = stray_temp_files(bed, COMPUTES, PAYLOAD_DIR)
    killed = bed.killed(sentinels)
    whole = bed.versions() == dict.fromkeys(COMPUTES, new)
    tally.injection(recovered=converged is not None and whole and strays == 0, converge_s=seconds,
                    torn_files=torn, jobs_killed=killed, note=note + (f", {strays} stray temp files" if strays else ""))


def _check_reported(bed: FaultBed, landing: Landing, node: str, new: int) -> str:
    """The apply either brought NODE to NEW or named it (non-zero exit); the other nodes are NEW. A note."""
    stale = others_new(bed, node, new)
    assert not stale, (stale, landing.output[-3000:])
    reached = bed.versions([node])[node] == new
    if not reached:
        assert landing.names_failure(node), f"{node} left at the old version without a word:\n{landing.output[-3000:]}"
    return f"{node} {landing.phase}: " + ("applied anyway" if reached else "reported")


def _assert_clean(tally: FaultTally) -> None:
    assert tally.injected > 0
    assert tally.torn_files == 0, tally
    assert tally.jobs_killed == 0, tally
    assert tally.recovered == tally.injected, tally


def _slurm_conf_torn(bed: FaultBed, allowed: set[str]) -> int:
    """Nodes whose slurm.conf is none of the ALLOWED texts."""
    return sum(1 for n in NODES if bed.exec(n, f"cat {SLURM_CONF}").stdout not in allowed)


def _rendered_slurm_conf(bed: FaultBed) -> str:
    """The slurm.conf the local desired state gives (the same on every node)."""
    done = bed.cli("render", str(bed.desired), "--node", "ctl", "--file", "slurm.conf")
    assert done.returncode == 0, done.stderr
    return done.stdout


def _mid_apply(bed: FaultBed, rng: random.Random, node: str, action: str, phases: tuple[str, ...]) -> Landing:
    """Land ACTION on NODE during an apply, in a random one of PHASES (a phase that comes and goes before the
    watcher sees it is tried again: only a fault that hit a running apply counts)."""
    for _ in range(4):
        landing = land_during_apply(bed, rng, node, action, rng.choice(phases))
        if landing.hit:
            return landing
    raise AssertionError(f"the fault never landed inside an apply on {node}")


def test_sshd_killed_mid_apply(fbed: FaultBed, rng: random.Random, repeats: Callable[[int, int], int],
                               tally: Callable[[str], FaultTally]) -> None:
    """sshd (and every session it holds) killed on a node while the apply gathers or writes: the node is reported
    or was done already, the others converge; supervisord restarts sshd and the next apply converges."""
    record = tally("sshd killed on a node mid-apply")
    fbed.start_sentinels(COMPUTES)
    apply_seconds(fbed)  # measured before the first bump: a `timed` landing draws within it
    for i in range(repeats(2, 12)):
        node = rng.choice(COMPUTES)
        old, new = fbed.version, fbed.bump()
        landing = _mid_apply(fbed, rng, node, "pkill -KILL -x sshd; true", (ALL_PHASES[i % 3],))
        note = _check_reported(fbed, landing, node, new)
        assert wait_until(lambda node=node: fbed.exec(node, "pgrep -x sshd").returncode == 0, 30)
        _finish(fbed, record, time.monotonic(), old, new, COMPUTES, note=note)
    _assert_clean(record)


def test_link_cut_mid_apply(fbed: FaultBed, rng: random.Random, repeats: Callable[[int, int], int],
                            tally: Callable[[str], FaultTally]) -> None:
    """A node's link set down inside its namespace mid-apply and up again after a random 0.5-6 s: an outage longer
    than the connect timeout is reported as unreachable, a shorter one is ridden out (TCP retransmits); the others
    get the new payload in the same apply; after the link is back the next apply converges."""
    record = tally("node link down mid-apply, restored")
    fbed.start_sentinels(COMPUTES)
    apply_seconds(fbed)
    for i in range(repeats(2, 10)):
        node = rng.choice(COMPUTES)
        outage = rng.uniform(0.5, 6.0)
        old, new = fbed.version, fbed.bump()
        action = f"ip link set eth0 down; sleep {outage:.2f}; ip link set eth0 up"
        landing = _mid_apply(fbed, rng, node, action, (ALL_PHASES[i % 3],))
        ended = time.monotonic()
        fbed.exec(node, "ip link set eth0 up", check=True)  # the watcher did; never leave a node cut off
        note = _check_reported(fbed, landing, node, new) + f" ({outage:.1f}s down)"
        _finish(fbed, record, ended, old, new, COMPUTES, note=note)
    _assert_clean(record)


def test_disk_full_at_the_target_directory(fbed: FaultBed, rng: random.Random, repeats: Callable[[int, int], int],
                                           tally: Callable[[str], FaultTally]) -> None:
    """The payload's directory on a full tmpfs on one node, with a random amount left free (the new copy fails
    part-way, or it fits and its backup does not): the old file stays whole, no temp copy stays behind, the error
    names the node, the file and ENOSPC, every other node converges; unmounted, the next apply converges."""
    record = tally("disk full at the target directory")
    fbed.start_sentinels(COMPUTES)
    size = len(payload_text(0))
    for i in range(repeats(2, 10)):
        node = rng.choice(COMPUTES)
        free = rng.randrange(0, size - 4096) if i % 2 == 0 else rng.randrange(size + 4096, 2 * size - 8192)
        old, new = fbed.version, fbed.bump()
        fbed.exec(node, f"cp -a {PAYLOAD} /tmp/p.old && cp -a {PAYLOAD}.reconciler-bak /tmp/p.bak && "
                        f"mount -t tmpfs -o size=1m tmpfs {PAYLOAD_DIR} && cp -a /tmp/p.old {PAYLOAD} && "
                        f"cp -a /tmp/p.bak {PAYLOAD}.reconciler-bak && "
                        f"(dd if=/dev/zero of={PAYLOAD_DIR}/fill bs=4k 2>/dev/null; true) && "
                        f"truncate -s -{free} {PAYLOAD_DIR}/fill", check=True)
        try:
            result = fbed.cli("apply", str(fbed.desired), "--yes")
            text = result.stdout + result.stderr
            assert result.returncode != 0, text[-2000:]
            line = next((ln for ln in text.splitlines() if node in ln and PAYLOAD in ln
                         and "No space left on device" in ln and "ENOSPC" in ln), "")
            assert line, text[-3000:]
            assert fbed.exec(node, f"cat {PAYLOAD}").stdout == payload_text(old)
            left = fbed.exec(node, f"ls -a {PAYLOAD_DIR}").stdout.split()
            assert sorted(left) == [".", "..", "fill", "payload.conf", "payload.conf.reconciler-bak"], left
            stale = others_new(fbed, node, new)
            assert not stale, stale
            torn_now = fbed.torn({old, new})
        finally:
            fbed.exec(node, f"umount {PAYLOAD_DIR}", check=True)
        ended = time.monotonic()
        _finish(fbed, record, ended, old, new, COMPUTES, note=f"{node} {free} B free", torn_before=torn_now)
    _assert_clean(record)


def test_slurmctld_stopped_when_a_reconfigure_is_due(fbed: FaultBed, repeats: Callable[[int, int], int],
                                                     tally: Callable[[str], FaultTally]) -> None:
    """slurm.conf changes (MaxTime) while slurmctld is stopped: every node's slurm.conf is written whole (old or
    new, never neither), the missed reconfigure is reported with a non-zero exit; slurmctld started again reads
    the new file and the cluster converges. (Stopped before the apply: `supervisorctl stop` takes longer than the
    writes-to-reconfigure window, so a stop landed mid-apply mostly finds the reconfigure already done.)"""
    record = tally("slurmctld stopped when a reconfigure is due")
    fbed.start_sentinels(COMPUTES)
    for _ in range(repeats(1, 10)):
        old_conf = _rendered_slurm_conf(fbed)
        old, new = fbed.version, fbed.bump(edit_cluster=True)
        new_conf = _rendered_slurm_conf(fbed)
        assert old_conf != new_conf
        fbed.exec("ctl", "supervisorctl stop slurmctld", check=True)
        try:
            done = fbed.cli("apply", str(fbed.desired), "--yes")
            text = done.stdout + done.stderr
            assert done.returncode != 0, text[-2000:]
            assert any("slurmctld" in ln or "scontrol" in ln for ln in text.splitlines()
                       if "FAILED" in ln or "error" in ln), text[-2000:]
            torn = fbed.torn({old, new}) + _slurm_conf_torn(fbed, {old_conf, new_conf})
        finally:
            fbed.exec("ctl", "supervisorctl start slurmctld", check=True)
        ended = time.monotonic()
        assert wait_until(lambda: fbed.exec("ctl", "scontrol ping").returncode == 0, 60)
        _finish(fbed, record, ended, old, new, COMPUTES, torn_before=torn)
        record.torn_files += _slurm_conf_torn(fbed, {new_conf})
        maxtime = fbed.exec("ctl", "scontrol show partition batch").stdout
        assert f"MaxTime=04:{new % 60:02d}:00" in maxtime, maxtime
    _assert_clean(record)


def test_munge_stopped_on_a_node(fbed: FaultBed, rng: random.Random, repeats: Callable[[int, int], int],
                                 tally: Callable[[str], FaultTally]) -> None:
    """munged stopped on a compute node across an apply with a reconfigure: files reach every node (SSH needs no
    munge), the reconfigure runs on ctl, the others converge; with munged back the node answers Slurm again
    (srun) and the next apply converges; no job is killed. (munge is not a managed service in this desired
    state, so the reconciler has nothing to say about it: noted, not asserted.)"""
    record = tally("munge stopped on a node")
    fbed.start_sentinels(COMPUTES)
    for _ in range(repeats(1, 10)):
        node = rng.choice(COMPUTES)
        old, new = fbed.version, fbed.bump(edit_cluster=True)
        fbed.exec(node, "supervisorctl stop munge", check=True)
        try:
            done = fbed.cli("apply", str(fbed.desired), "--yes")
            stale = others_new(fbed, node, new)
            assert not stale, (stale, done.stdout[-2000:])
            torn = fbed.torn({old, new})
        finally:
            fbed.exec(node, "supervisorctl start munge", check=True)
        ended = time.monotonic()
        assert wait_until(lambda node=node: fbed.exec("ctl", f"srun -w {node} -N1 --immediate=20 true").returncode
                          == 0, 90)
        _finish(fbed, record, ended, old, new, COMPUTES, note=f"{node}: apply exit {done.returncode}",
                torn_before=torn)
    _assert_clean(record)


def test_munge_stopped_on_the_controller_reconfigure_is_not_lost(fbed: FaultBed, repeats: Callable[[int, int], int],
                                                                 tally: Callable[[str], FaultTally]) -> None:
    """munged stopped on ctl when a reconfigure is due: the reconfigure fails (reported); with munged back the
    next apply must run it (the step is owed on the node), so that slurmctld runs the new MaxTime."""
    record = tally("munge stopped on the controller when a reconfigure is due")
    for _ in range(repeats(1, 10)):
        fbed.start_sentinels(COMPUTES)
        running = [n for n in COMPUTES if fbed.job_running(n)]  # a job still pending is not counted
        old, new = fbed.version, fbed.bump(edit_cluster=True)
        fbed.exec("ctl", "supervisorctl stop munge", check=True)
        try:
            done = fbed.cli("apply", str(fbed.desired), "--yes")
            reported = done.returncode != 0 and "scontrol reconfigure" in done.stdout
            torn = fbed.torn({old, new})
        finally:
            fbed.exec("ctl", "supervisorctl start munge", check=True)
        ended = time.monotonic()
        assert wait_until(lambda: fbed.exec("ctl", "scontrol ping").returncode == 0, 60)
        converged = fbed.converge()
        seconds = None if converged is None else time.monotonic() - ended
        live = f"MaxTime=04:{new % 60:02d}:00" in fbed.exec("ctl", "scontrol show partition batch").stdout
        fbed.exec("ctl", "scontrol reconfigure")  # whatever the outcome, leave slurmctld on the file for what follows
        record.injection(recovered=reported and converged is not None and live,
                         converge_s=seconds if live else None, torn_files=torn + fbed.torn({new}),
                         jobs_killed=fbed.killed(running),
                         note="reconfigure lost: plan clean, slurmctld on the old MaxTime" if not live else "")
        assert reported, done.stdout[-2000:]
        assert live, "slurmctld still runs the old configuration after a clean plan"
        assert fbed.killed(running) == 0, "a sentinel job was killed"


def test_node_rebooted_while_facts_are_gathered(fbed: FaultBed, rng: random.Random,
                                                repeats: Callable[[int, int], int],
                                                tally: Callable[[str], FaultTally]) -> None:
    """Every process of a node but its init killed (a reboot: supervisord starts sshd, munged, slurmd again) while
    the fact-gathering python runs there (or, one time in three, while its writer runs): the node is reported or
    done, the others converge, the node converges once it is back, and the sentinel jobs on the other nodes still
    run (the rebooted node's own job is lost, as on a real reboot, and not counted)."""
    record = tally("node rebooted during an apply (CLI)")
    for i in range(repeats(1, 10)):
        node = rng.choice(COMPUTES)
        others = [n for n in COMPUTES if n != node]
        fbed.start_sentinels(others)
        running = [n for n in others if fbed.job_running(n)]  # a job still pending when the node fell is not counted
        old, new = fbed.version, fbed.bump()
        landing = _mid_apply(fbed, rng, node, REBOOT, ("write",) if i % 3 == 2 else ("gather",))
        note = _check_reported(fbed, landing, node, new)
        assert wait_until(lambda node=node: fbed.exec(node, "pgrep -x sshd && pgrep -x slurmd").returncode == 0, 60)
        ended = time.monotonic()
        fbed.exec("ctl", f"scontrol update nodename={node} state=resume", check=False)
        _finish(fbed, record, ended, old, new, running, note=note)
        fbed.jobs.pop(node, None)
    _assert_clean(record)


def test_payload_is_whole_everywhere_at_the_end(fbed: FaultBed) -> None:
    """After every fault: the payload is the last version on every compute node and the plan is clean."""
    assert fbed.versions() == dict.fromkeys(COMPUTES, fbed.version)
    assert fbed.plan_clean()
