"""The policy-rc.d around a Slurm package transaction, run by a real /bin/sh in a scratch directory (the node's
path is /usr/sbin/policy-rc.d, fixed by invoke-rc.d and deb-systemd-invoke): while the transaction runs, the Slurm
daemons are refused (exit 101, whatever invoke-rc.d puts before the name) and every other service is the node's
own policy-rc.d's call; afterwards the node's file is back byte for byte, whatever the transaction's exit."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from reconciler.drivers.slurm_upgrade_steps import MARK, backup_state, without_daemon_restarts

OWN = "#!/bin/sh\necho \"own $*\" >> \"$(dirname \"$0\")/asked\"\nexit 104\n"


def run(policy: Path, inside: str) -> subprocess.CompletedProcess[str]:
    """The wrapper around INSIDE, POLICY as the policy-rc.d path."""
    return subprocess.run(["/bin/sh", "-c", without_daemon_restarts(inside, policy=str(policy))],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("own", [True, False])
def test_slurm_daemons_refused_others_asked_and_the_file_put_back(tmp_path: Path, own: bool) -> None:
    """During: slurmd, slurmctld.service and `--quiet slurmdbd restart` get 101; another service gets the node's
    own answer (104, its file logging the ask) or 0 without one. After: the node's file as before, or none."""
    policy = tmp_path / "policy-rc.d"
    if own:
        policy.write_text(OWN)
        policy.chmod(0o755)
    probe = (f"P={policy}; $P slurmd start; echo $?; $P slurmctld.service restart; echo $?; "
             f"$P --quiet slurmdbd restart 2; echo $?; $P nginx start; echo $?")
    done = run(policy, probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["101", "101", "101", "104" if own else "0"], done.stdout
    if own:
        assert policy.read_text() == OWN and (tmp_path / "asked").read_text() == "own nginx start\n"
    else:
        assert not policy.exists()
    assert not (tmp_path / "policy-rc.d.reconciler-aside").exists()


def test_a_failed_transaction_keeps_its_exit_and_still_puts_the_file_back(tmp_path: Path) -> None:
    """The transaction's exit status comes out; the node's policy-rc.d is back."""
    policy = tmp_path / "policy-rc.d"
    policy.write_text(OWN)
    done = run(policy, f"grep -qF {shlex.quote(MARK)} {policy} && exit 42")
    assert done.returncode == 42, (done.stdout, done.stderr)  # ours was in place during it
    assert policy.read_text() == OWN


def test_a_leftover_of_ours_is_replaced_not_kept_as_the_nodes(tmp_path: Path) -> None:
    """A run killed mid-transaction left our policy in place with the node's aside: the next run keeps the node's
    aside (never takes ours for it) and puts the node's back after."""
    policy = tmp_path / "policy-rc.d"
    policy.write_text(f"#!/bin/sh\n# {MARK}\nexit 101\n")
    aside = tmp_path / "policy-rc.d.reconciler-aside"
    aside.write_text(OWN)
    aside.chmod(0o755)
    done = run(policy, "true")
    assert done.returncode == 0, done.stderr
    assert policy.read_text() == OWN and not aside.exists()


def test_state_backup_names_its_archive_once_even_when_the_clock_ticks(tmp_path: Path) -> None:
    """The StateSaveLocation archive is written as NAME.part and moved to NAME: one name, however slow tar is. A
    `date` on PATH that answers a later second at each call (the clock ticking during tar) must not split it: the
    name came from two `$(date)`s, and the testbed's upgrade failed with `mv: cannot stat '...Z.tar.gz.part'`."""
    state, backups, bin_dir = tmp_path / "state", tmp_path / "backups", tmp_path / "bin"
    state.mkdir()
    (state / "node_state").write_text("nodes\n")
    bin_dir.mkdir()
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=c\nStateSaveLocation={state}\n")
    tick = bin_dir / "date"
    tick.write_text(f"#!/bin/sh\nn=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/n\n"
                    "echo 20261128T1633${n}0Z\n")
    tick.chmod(0o755)
    step = backup_state(str(conf), str(backups), "24.11", "26.05")
    done = subprocess.run(["/bin/sh", "-c", step.command], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    archives = sorted(p.name for p in backups.iterdir())
    assert archives == ["statesave-24.11-to-26.05-20261128T163300Z.tar.gz"], archives
    listed = subprocess.run(["tar", "-tzf", str(backups / archives[0])], capture_output=True, text=True, timeout=30)
    assert "./node_state" in listed.stdout.split()
    assert done.stdout.strip() == f"{state} -> {backups / archives[0]}"
