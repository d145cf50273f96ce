"""The engine on the testbed, over real SSH, against real Slurm (issue 4's "Must show" list)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.engine.conftest import REPO, Bed

pytestmark = pytest.mark.testbed

MANAGED = ["/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/exports", "/etc/fstab", "/etc/slurm/prolog.sh",
           "/srv/shared/images/pytorch-24.04.sqsh"]
NODES = ["ctl", "gpu01", "gpu02"]


def hashes(bed: Bed) -> dict[str, str]:
    """sha256 (or 'absent') of every managed path on every node."""
    out = {}
    for node in NODES:
        script = "; ".join(f"sha256sum {p} 2>/dev/null || echo absent {p}" for p in MANAGED)
        out[node] = bed.exec(node, script).stdout
    return out


def wait_for(check, timeout: float = 60) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(1)
    return False


def test_01_first_apply_configures_slurm(bed: Bed) -> None:
    assert bed.exec("ctl", "test -e /etc/slurm/slurm.conf", check=False).returncode != 0  # bare
    before = hashes(bed)
    plan = bed.cli("plan", str(bed.desired))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert hashes(bed) == before, "plan changed a file"
    result = bed.cli("apply", str(bed.desired), "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert wait_for(lambda: "idle" in bed.exec("ctl", "sinfo -h -o '%P %T %N'").stdout)
    sinfo = bed.exec("ctl", "sinfo -h -o '%P %D %N'").stdout.split("\n")
    assert "debug* 2 gpu[01-02]" in sinfo and "batch 2 gpu[01-02]" in sinfo
    srun = bed.exec("ctl", "srun -N2 hostname")
    assert sorted(srun.stdout.split()) == ["gpu01", "gpu02"]


def test_02_second_plan_is_clean_and_changes_nothing(bed: Bed) -> None:
    before = hashes(bed)
    plan = bed.cli("plan", str(bed.desired))
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "no changes" in plan.stdout
    assert hashes(bed) == before
    data = json.loads(bed.cli("plan", str(bed.desired), "--format", "json").stdout)
    assert data["summary"]["counts"].get("update", 0) == 0 and data["followups"] == []


def test_03_hand_edit_is_drift_on_that_node_only_and_healed(bed: Bed) -> None:
    bed.exec("gpu02", "sed -i 's/MaxTime=04:00:00/MaxTime=09:00:00/' /etc/slurm/slurm.conf")
    plan = json.loads(bed.cli("plan", str(bed.desired), "--format", "json").stdout)
    changing = [(c["nodes"], c["resource"]) for c in plan["changes"] if c["action"] in ("create", "update", "delete")]
    assert changing == [(["gpu02"], "/etc/slurm/slurm.conf")]
    per_node = json.loads(bed.cli("plan", str(bed.desired), "--format", "json", "--per-node").stdout)
    assert [(c["node"], c["resource"]) for c in per_node["changes"] if c["action"] == "update"] == [
        ("gpu02", "/etc/slurm/slurm.conf")]
    one = bed.cli("plan", str(bed.desired), "--node", "gpu02")
    assert one.returncode == 2 and "\ngpu02:\n" in one.stdout, one.stdout + one.stderr
    assert "--- gpu02:/etc/slurm/slurm.conf (current)" in one.stdout and "+PartitionName=" in one.stdout
    assert bed.cli("apply", str(bed.desired), "--yes").returncode == 0
    assert "MaxTime=04:00:00" in bed.exec("gpu02", "cat /etc/slurm/slurm.conf").stdout
    assert bed.cli("plan", str(bed.desired)).returncode == 0


def test_04_user_line_outside_fstab_block_survives(bed: Bed) -> None:
    bed.exec("gpu01", "echo 'tmpfs /scratch tmpfs defaults 0 0' >> /etc/fstab")
    bed.exec("gpu01", "sed -i 's|ctl:/srv/shared /shared nfs defaults 0 0|ctl:/srv/shared /shared nfs ro 0 0|' /etc/fstab")
    assert bed.cli("apply", str(bed.desired), "--yes").returncode == 0
    fstab = bed.exec("gpu01", "cat /etc/fstab").stdout
    assert "tmpfs /scratch tmpfs defaults 0 0" in fstab
    assert "ctl:/srv/shared /shared nfs defaults 0 0" in fstab
    assert " /srv/shared /shared " in bed.exec("gpu01", "cat /proc/self/mountinfo").stdout  # the NFS stand-in


def test_05_patch_applies_once_and_refuses_when_it_does_not_apply(bed: Bed, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    script = '#!/bin/sh\nif (grep -q "ID=debian" /etc/os-release && lsb_release -rs | grep -q "12"); then\n  echo rxdm\nfi\n'
    bed.exec("gpu01", f"mkdir -p /opt/adm && printf '%s' '{script}' > /opt/adm/rxdm")
    bed.exec("gpu02", "mkdir -p /opt/adm && printf 'unrelated\\n' > /opt/adm/rxdm")
    desired = tmp_path / "patched"
    shutil.copytree(bed.desired, desired)
    with open(desired / "patches.yaml", "a") as fh:
        fh.write("  - name: rxdm-ubuntu\n    path: /opt/adm/rxdm\n    nodes: gpu[01-02]\n"
                 "    match: 'if (grep -q \"ID=debian\" /etc/os-release && lsb_release -rs | grep -q \"12\"); then'\n"
                 "    replace: 'if (grep -q \"ID=ubuntu\" /etc/os-release && lsb_release -rs | grep -q \"22.04\"); then'\n")
    before_gpu02 = bed.exec("gpu02", "sha256sum /opt/adm/rxdm").stdout
    first = bed.cli("apply", str(desired), "--yes")
    assert first.returncode == 1  # gpu02's patch does not apply
    assert "patch 'rxdm-ubuntu' does not apply" in first.stdout + first.stderr
    assert bed.exec("gpu02", "sha256sum /opt/adm/rxdm").stdout == before_gpu02
    patched = bed.exec("gpu01", "cat /opt/adm/rxdm").stdout
    assert 'grep -q "ID=ubuntu"' in patched and "ID=debian" not in patched
    second = bed.cli("plan", str(desired), "--limit", "gpu01")
    assert second.returncode == 0, second.stdout
    assert bed.exec("gpu01", "cat /opt/adm/rxdm").stdout == patched
    bed.exec("gpu01", "rm /opt/adm/rxdm /opt/adm/rxdm.reconciler-bak")
    bed.exec("gpu02", "rm /opt/adm/rxdm")


def test_06_unreachable_node_reported_and_others_converge(bed: Bed) -> None:
    bed.exec("gpu02", "supervisorctl stop sshd")
    try:
        bed.exec("gpu01", "sed -i 's/MaxTime=01:00:00/MaxTime=02:00:00/' /etc/slurm/slurm.conf")
        plan = bed.cli("plan", str(bed.desired))
        assert "gpu02" in plan.stdout and "unreachable" in plan.stdout
        assert plan.returncode == 1  # gpu02's state is unknown: not "no changes" nor just "changes"
        result = bed.cli("apply", str(bed.desired), "--yes")
        assert "unreachable" in result.stdout
        assert result.returncode == 1  # gpu01 converged, but not everything was applied
        assert "MaxTime=01:00:00" in bed.exec("gpu01", "cat /etc/slurm/slurm.conf").stdout
    finally:
        bed.exec("gpu02", "supervisorctl start sshd")
    assert wait_for(lambda: bed.cli("plan", str(bed.desired)).returncode == 0, 30)


def test_07_restart_drains_waits_for_job_and_keeps_admin_drain(bed: Bed, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    bed.exec("ctl", "scontrol update nodename=gpu02 state=drain reason=maintenance")
    bed.exec("ctl", "sbatch -w gpu01 -N1 --wrap 'sleep 12' -o /dev/null")
    assert wait_for(lambda: "RUNNING" in bed.exec("ctl", "squeue -h -o %T").stdout, 30)
    job = bed.exec("ctl", "squeue -h -o %A").stdout.split()[0]
    desired = tmp_path / "gres"
    shutil.copytree(bed.desired, desired)
    text = (desired / "cluster.yaml").read_text().replace("RealMemory: 1000", "RealMemory: 900")
    (desired / "cluster.yaml").write_text(text)
    plan = bed.cli("plan", str(desired))
    assert "will be drained first" in plan.stdout and f"jobs {job}" in plan.stdout
    pid_before = bed.exec("gpu01", "cat /run/slurmd.pid").stdout.strip()
    result = bed.cli("apply", str(desired), "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.index("drain gpu01") < out.index("restart slurmd") < out.index("resume gpu01")
    acct = bed.exec("ctl", f"scontrol show job {job} -o", check=False).stdout
    assert "JobState=CANCELLED" not in acct and "JobState=FAILED" not in acct
    assert bed.exec("gpu01", "cat /run/slurmd.pid").stdout.strip() != pid_before
    nodes = bed.exec("ctl", "scontrol show node -o").stdout
    gpu01 = next(line for line in nodes.splitlines() if line.startswith("NodeName=gpu01 "))
    gpu02 = next(line for line in nodes.splitlines() if line.startswith("NodeName=gpu02 "))
    assert "DRAIN" not in re.search(r"State=(\S+)", gpu01).group(1)
    assert "DRAIN" in re.search(r"State=(\S+)", gpu02).group(1) and "Reason=maintenance" in gpu02
    assert bed.cli("apply", str(desired), "--yes").returncode == 0
    assert "Reason=maintenance" in bed.exec("ctl", "scontrol show node gpu02").stdout
    bed.exec("ctl", "scontrol update nodename=gpu02 state=resume")
    assert bed.cli("apply", str(bed.desired), "--yes").returncode == 0


def test_08_sigkill_during_writes_leaves_old_or_new(bed: Bed) -> None:
    big = "x" * 4_000_000
    from reconciler.engine.ops import WriteFile
    from reconciler.engine.remote_write import WRITE_COMMAND, write_request

    bed.exec("gpu01", "mkdir -p /var/tmp/kill && for i in 1 2 3 4 5 6 7 8; do echo old > /var/tmp/kill/f$i; done")
    ops = [WriteFile(path=f"/var/tmp/kill/f{i}", content=big + str(i)) for i in range(1, 9)]
    cmd = ["ssh", "-F", str(bed.state_dir / "ssh_config"), "gpu01", WRITE_COMMAND]
    for delay in (0.15, 0.3, 0.5):
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert proc.stdin is not None
        proc.stdin.write(write_request(ops).encode())
        proc.stdin.close()
        time.sleep(delay)
        bed.exec("gpu01", "pkill -KILL -f 'reconciler-tmp' || pkill -KILL -f 'python3 -c' || true", check=False)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        sizes = bed.exec("gpu01", "for i in 1 2 3 4 5 6 7 8; do wc -c < /var/tmp/kill/f$i; done").stdout.split()
        assert all(int(s) in (4, 4_000_001) for s in sizes), sizes
    assert REPO.exists() and sys.executable
