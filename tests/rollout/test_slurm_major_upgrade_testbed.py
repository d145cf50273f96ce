"""A real Slurm major upgrade on the testbed, 24.11 -> 26.05 with Debian's own packages, jobs running throughout.

Real Slurm 24.11.5 (Debian 13 root) with accounting (slurmdbd on MariaDB), real apt/dpkg against the testbed's
signed repository offering Debian's slurm-wlm 26.05.5-1 (sid) beside 24.11's own, a real `reconciler run` daemon
pulling a real Git remote: the upgrade commit pins every Slurm package to 26.05.5-1 while a two-node job and a long
one-node job run. Shown: the plan's order and backup; both jobs COMPLETED 0:0 in sacct, read from the converted
database; every daemon and client at 26.05; no node ever DOWN; no slurmd ever newer than slurmctld (read from the
daemons' own logs, dpkg's log and the daemon's wave lines, not from the plan); the second plan empty. Then a daemon
killed after slurmdbd moved and before the controller, and one killed between slurmd waves, resume in order.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.daemon.harness import GitRemote
from tests.rollout.slurm_upgrade_bed import (
    COMPUTE_PACKAGES,
    CTL_PACKAGES,
    CTLD_LOG,
    NODES,
    ROLLOUT,
    SLURMD_LOG,
    StateWatch,
    installed,
    installed_at,
    job_state,
    pins,
    running_versions,
    started_at,
    upstream,
)
from tests.rollout.upgrade_bed import cli, daemon, field, poll
from tests.testbed_fixture import Testbed

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(900)]
BASE_ROLLOUT = "rollout:\n  waves: all\n"


def upgrade_bed(testbed_factory: Callable[..., Testbed], tmp_path: Path) -> tuple[Testbed, GitRemote, str, str]:
    """A fresh 24.11 testbed (3 compute nodes, accounting, the package repository), its desired state applied
    with every Slurm package pinned where it is, in a Git remote; (bed, remote, old, new)."""
    bed = testbed_factory(nodes=len(NODES), slurm="24.11", accounting=True, packages=True)
    bed.wait_idle(timeout=120)
    releases = bed.package_manifest["slurm"]["releases"]
    old, new = releases["24.11"], releases["26.05"]
    desired = tmp_path / "desired"
    shutil.copytree(bed.desired_state, desired)
    (desired / "rollout.yaml").write_text(BASE_ROLLOUT)
    (desired / "packages.yaml").write_text(pins(old, old))
    first = cli("apply", "--yes", str(desired))
    assert first.returncode == 0, first.stdout + first.stderr
    return bed, GitRemote.create(tmp_path, desired), old, new


def upgrade_commit(remote: GitRemote, new: str) -> str:
    """Push the upgrade: every Slurm package at NEW, the rollout in waves with the database backup."""
    return remote.commit(f"Slurm {new}", {"rollout.yaml": lambda _: ROLLOUT, "packages.yaml": lambda _: pins(new, new)})


def check_upgraded(bed: Testbed, remote: GitRemote, new: str, since: datetime) -> None:
    """Every package, binary, client and running daemon at NEW; no slurmd started at NEW (nor its package
    installed) before slurmctld started at NEW (after SINCE); the second plan empty."""
    version = upstream(new)
    assert installed(bed, "ctl", CTL_PACKAGES) == dict.fromkeys(CTL_PACKAGES, new)
    for node in NODES:
        assert installed(bed, node, COMPUTE_PACKAGES) == dict.fromkeys(COMPUTE_PACKAGES, new), node
        assert bed.run(node, "slurmd -V", check=True).stdout.split() == ["slurm-wlm", version], node
    for command in ("slurmctld -V", "sinfo --version", "sacctmgr --version", "slurmdbd -V"):
        assert bed.run("ctl", command, check=True).stdout.split() == ["slurm-wlm", version], command
    assert running_versions(bed) == {"slurmctld": version, "slurmdbd": version, **dict.fromkeys(NODES, version)}
    ctld = [t for t in started_at(bed, "ctl", CTLD_LOG, "slurmctld", version) if t >= since]
    assert len(ctld) >= 1, ctld
    for node in NODES:  # slurmctld first: its start at 26.05 precedes every slurmd's, and every slurmd package
        slurmd = [t for t in started_at(bed, node, SLURMD_LOG, "slurmd", version) if t >= since]
        packaged = [t for t in installed_at(bed, node, "slurmd", new) if t >= since.replace(microsecond=0)]
        assert slurmd and packaged, (node, slurmd, packaged)
        assert min(slurmd) > ctld[0] and min(packaged) >= ctld[0].replace(microsecond=0), (node, ctld, slurmd,
                                                                                            packaged)
    again = cli("plan", str(remote.work))
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr


def waves_in_order(log: str) -> list[tuple[str, str]]:
    """The waves the daemon applied, in its log's order (`wave 1/3 (lead): applying to ctl`)."""
    return re.findall(r"wave (\d+/\d+ \([a-z0-9 ]+\)): applying to ([a-z0-9\[\],-]+)", log)


def test_24_11_to_26_05_with_jobs_running(testbed_factory: Callable[..., Testbed], tmp_path: Path) -> None:
    """The upgrade commit goes out while a 2-node job and a long 1-node job run: backup, slurmdbd (converting its
    database), slurmctld, then slurmd in gated waves; both jobs end COMPLETED 0:0 in the converted database, every
    daemon and client is 26.05, no node was ever DOWN, no slurmd ran newer than slurmctld, the next plan is empty."""
    bed, remote, old, new = upgrade_bed(testbed_factory, tmp_path)
    state_dir = tmp_path / "state"
    run = daemon(tmp_path, remote, state_dir, 1)
    watch = StateWatch(bed)
    try:
        run.wait_applied(remote.head(), timeout=180)
        wide = bed.run("ctl", "sbatch --parsable -N2 -w gpu[02-03] -o /dev/null --wrap 'srun sleep 45'",
                       check=True).stdout.strip()
        long = bed.run("ctl", "sbatch --parsable -w gpu01 -o /dev/null --wrap 'sleep 70'", check=True).stdout.strip()
        for job in (wide, long):
            poll(f"job {job} running", lambda j=job: "JobState=RUNNING" in str(bed.run(  # type: ignore[misc]
                "ctl", f"scontrol show job -o {j}").stdout), 60)
        since = datetime.now()
        work = tmp_path / "plan"
        shutil.copytree(remote.work, work, ignore=shutil.ignore_patterns(".git"))
        (work / "rollout.yaml").write_text(ROLLOUT)
        (work / "packages.yaml").write_text(pins(new, new))
        plan = cli("plan", str(work))
        text = plan.stdout
        assert plan.returncode == 2, text + plan.stderr
        assert re.search(r"wave 1/3 lead: ctl .*\n.*wave 2/3 canary: gpu01 .*\n.*wave 3/3 step 2: gpu\[02-03\]",
                         text), text
        assert f"stop slurmdbd and back up the accounting database before slurmdbd {old} → {new}" in text, text
        assert "slurmctld stopped, its StateSaveLocation archived" in text, text
        assert "slurmd restarted (running jobs go on)" in text, text
        watch.start()
        target = upgrade_commit(remote, new)
        run.wait_applied(target, timeout=400)
        log = run.log_path.read_text(errors="replace")
    finally:
        seen = watch.stop() if watch.is_alive() else {}
        run.stop()
    assert watch.polls > 10, watch.polls
    down = {n: s for n, s in seen.items() if any(state.startswith(("down", "fail")) for state in s)}
    assert not down, seen
    assert [w for w, _ in waves_in_order(log)] == ["1/3 (lead)", "2/3 (canary)", "3/3 (step 2)"], log[-4000:]
    assert [n for _, n in waves_in_order(log)] == ["ctl", "gpu01", "gpu[02-03]"], log[-4000:]
    for job in (wide, long):  # both ran through; sacct answers from the upgraded slurmdbd's converted database
        def ended(j: str = job) -> list[str]:
            found = job_state(bed, j)
            return found if found and found[1] not in ("RUNNING", "PENDING", "REQUEUED") else []
        fields = poll(f"job {job} ended", ended, 150, 1.0)
        assert isinstance(fields, list) and fields[:3] == [job, "COMPLETED", "0:0"], fields
        assert datetime.fromisoformat(fields[3]) < since, (fields, since)  # it was running before the upgrade
    restarts = bed.run("ctl", f"scontrol show job -o {long} 2>/dev/null; true").stdout
    assert field(restarts, "Restarts") in ("", "0"), restarts
    assert bed.run("ctl", "ls /var/backups/slurm_acct_db.sql /var/backups/slurmctld-state/", check=True).stdout
    check_upgraded(bed, remote, new, since)


@pytest.mark.parametrize("kill_at", ["after-slurmdbd", "between-slurmd-waves"])
def test_killed_upgrade_resumes_in_order(testbed_factory: Callable[..., Testbed], tmp_path: Path,
                                         kill_at: str) -> None:
    """SIGKILL of the daemon after slurmdbd answers at 26.05 but before slurmctld moves (its package is already
    26.05 on the shared node: a replaced binary still running 24.11), or after the canary's slurmd registered at
    26.05 with the other two still 24.11: the restarted daemon restarts slurmctld before any slurmd moves, then
    finishes the slurmd waves; every daemon ends at 26.05 and no slurmd ever ran newer than slurmctld."""
    bed, remote, _, new = upgrade_bed(testbed_factory, tmp_path)
    version = upstream(new)
    state_dir = tmp_path / "state"
    point = {"after-slurmdbd": f"op.wait-for-slurmdbd-{version}-its-database-conversion",
             "between-slurmd-waves": f"op.wait-for-slurmd-{version}-to-register"}[kill_at]
    first = daemon(tmp_path, remote, state_dir, 1, failpoints=f"{point}=sleep(300)")
    try:
        first.wait_applied(remote.head(), timeout=180)
        since = datetime.now()
        target = upgrade_commit(remote, new)
        if kill_at == "after-slurmdbd":
            poll("slurmdbd answering at 26.05", lambda: running_versions(bed).get("slurmdbd") == version, 300, 0.5)
        else:
            poll("gpu01's slurmd registered at 26.05", lambda: running_versions(bed).get("gpu01") == version, 300, 0.5)
    finally:
        first.kill()
    # after slurmdbd: ask through a 24.11 client (ctl's 26.05 commands get no answer from the 24.11 slurmctld)
    via = "gpu03" if kill_at == "after-slurmdbd" else "ctl"
    # a node not registered again since slurmctld's restart shows no Version= yet: wait for all three (bounded)
    poll("every slurmd's version known", lambda: all(n in running_versions(bed, via=via) for n in NODES), 60, 0.5)
    held = running_versions(bed, via=via)
    if kill_at == "after-slurmdbd":
        assert (held.get("slurmdbd"), held.get("slurmctld"), held.get("gpu01")) == (version, "24.11.5", "24.11.5"), \
            held
        assert installed(bed, "ctl", ["slurmctld"]) == {"slurmctld": new}  # moved with slurmdbd; not restarted
        assert bed.run("ctl", "readlink /proc/$(pgrep -xo slurmctld)/exe", check=True).stdout.strip().endswith(
            "(deleted)")
    else:
        assert (held.get("slurmctld"), held.get("gpu01"), held.get("gpu02"), held.get("gpu03")) == (
            version, version, "24.11.5", "24.11.5"), (held, bed.run("ctl", "scontrol show node -o").stdout)
    plan = cli("plan", str(remote.work))
    if kill_at == "after-slurmdbd":  # what the restarted daemon will do, in the plan's words
        assert f"slurmctld runs a replaced binary while slurmctld {new} is installed" in plan.stdout, plan.stdout
        assert re.search(r"wave 1/\d lead: ctl ", plan.stdout), plan.stdout

    second = daemon(tmp_path, remote, state_dir, 2)
    try:
        second.wait_applied(target, timeout=400)
    finally:
        second.stop()
    waves = [nodes for _, nodes in waves_in_order(second.log_path.read_text(errors="replace"))]
    if kill_at == "after-slurmdbd":  # slurmctld's restart led, alone; then the slurmd waves
        assert waves[0] == "ctl" and "ctl" not in ",".join(waves[1:]), waves
    else:  # the controller is done: only compute nodes went out again
        assert waves and all(w.startswith("gpu") for w in waves), waves
    check_upgraded(bed, remote, new, since)


def test_wrong_orders_refused_on_the_real_cluster(testbed_factory: Callable[..., Testbed], tmp_path: Path) -> None:
    """On a live 24.11 cluster with accounting: slurmd (and the commands) to 26.05 before the controller, and
    slurmdbd to 26.05 without a database backup, are refused naming the rule; nothing moves on any node."""
    bed, remote, old, new = upgrade_bed(testbed_factory, tmp_path)
    before = {n: installed(bed, n, CTL_PACKAGES if n == "ctl" else COMPUTE_PACKAGES) for n in ["ctl", *NODES]}
    running = running_versions(bed)
    cases = {"slurmd-not-newer-than-slurmctld": (ROLLOUT, pins(old, new)),
             "slurmdbd-backup-first": (BASE_ROLLOUT, pins(new, new))}
    for rule, (rollout, packages) in cases.items():
        desired = tmp_path / rule
        shutil.copytree(remote.work, desired, ignore=shutil.ignore_patterns(".git"))
        (desired / "rollout.yaml").write_text(rollout)
        (desired / "packages.yaml").write_text(packages)
        done = cli("apply", "--yes", str(desired))
        output = done.stdout + done.stderr
        assert done.returncode != 0 and f"(rule {rule})" in output, output
        assert not re.search(r"^applied [1-9]", output, re.M), output
        after = {n: installed(bed, n, CTL_PACKAGES if n == "ctl" else COMPUTE_PACKAGES) for n in ["ctl", *NODES]}
        assert after == before, (rule, after)
        assert running_versions(bed) == running, rule


def test_22_05_to_24_11_refused_outside_the_window(testbed_factory: Callable[..., Testbed], tmp_path: Path) -> None:
    """On a live 22.05 cluster whose repository offers Debian's 24.11 packages: 22.05 -> 24.11 skips past Slurm's
    window (24.11 takes over from 24.05, 23.11 and 23.02) and is refused naming the rule; nothing moves."""
    bed = testbed_factory(nodes=1, slurm="22.05", packages=True)
    bed.wait_idle(timeout=120)
    target = bed.package_manifest["slurm"]["releases"]["24.11"]
    have = installed(bed, "gpu01", COMPUTE_PACKAGES)
    assert all(v.startswith("22.05.") for v in have.values()), have
    desired = tmp_path / "desired"
    shutil.copytree(bed.desired_state, desired)
    (desired / "rollout.yaml").write_text(ROLLOUT)
    (desired / "packages.yaml").write_text(pins(target, target, nodes="gpu01"))
    plan = cli("plan", str(desired))
    assert "(rule slurm-release-window)" in plan.stdout and "upgrade to 23.11 first" in plan.stdout, plan.stdout
    done = cli("apply", "--yes", str(desired))
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Slurm 22.05 → 24.11 skips more releases than Slurm supports" in output, output
    assert installed(bed, "gpu01", COMPUTE_PACKAGES) == have
    assert bed.run("ctl", "slurmctld -V", check=True).stdout.split()[1].startswith("22.05.")
