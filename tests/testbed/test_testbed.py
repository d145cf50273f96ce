"""The local testbed (deploy/testbed): issue 3's "Must show" list, on real namespaces, sshd, munge and Slurm."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.testbed_fixture import TESTBED, Testbed

pytestmark = pytest.mark.testbed


def host_processes_in(netns_inodes: set[int], pidns_inodes: set[int]) -> list[int]:
    """Host PIDs of live processes in any of the given network or PID namespaces."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            net = os.stat(f"/proc/{entry}/ns/net").st_ino
            pid = os.stat(f"/proc/{entry}/ns/pid").st_ino
        except OSError:
            continue
        if state != "Z" and (net in netns_inodes or pid in pidns_inodes):
            found.append(int(entry))
    return found


# ------------------------------------------------------------------------------------------ basic node facts


def test_ssh_hostname_is_the_node_name(testbed: Testbed) -> None:
    for node in ("ctl", "gpu01", "gpu02"):
        assert testbed.ssh(node, "hostname", check=True).stdout.strip() == node


def test_a_file_written_on_gpu01_is_absent_on_gpu02_and_on_the_host(testbed: Testbed) -> None:
    path = f"/root/isolation-{uuid.uuid4().hex}"
    testbed.ssh("gpu01", f"echo gpu01 > {path} && mkdir /mnt/{Path(path).name}", check=True)
    assert testbed.ssh("gpu01", f"cat {path}", check=True).stdout == "gpu01\n"
    assert testbed.ssh("gpu02", f"test -e {path} || test -e /mnt/{Path(path).name}").returncode == 1
    assert not Path(path).exists()
    assert not Path(f"/mnt/{Path(path).name}").exists()


def test_each_node_has_its_own_host_key_and_hosts_file(testbed: Testbed) -> None:
    keys = [line.split()[2] for line in testbed.known_hosts.read_text().splitlines()]
    assert len(set(keys)) == len(testbed.nodes)
    host_key = Path("/etc/ssh/ssh_host_ed25519_key.pub")
    if host_key.exists():
        assert host_key.read_text().split()[1] not in keys
    hosts = testbed.ssh("gpu02", "cat /etc/hosts", check=True).stdout
    for node in testbed.nodes:
        assert f"{testbed.ip(node)}\t{node}" in hosts
    ssh_dir = testbed.ssh("gpu01", "ls /etc/ssh", check=True).stdout.split()
    assert "ssh_host_rsa_key" not in ssh_dir and "ssh_host_ed25519_key" in ssh_dir


def test_password_login_is_refused(testbed: Testbed) -> None:
    proc = testbed.ssh("gpu01", "true", options=("-o", "PubkeyAuthentication=no",
                                                 "-o", "PreferredAuthentications=password"))
    assert proc.returncode == 255


def test_root_gets_stock_debian_dotfiles(testbed: Testbed) -> None:
    bashrc = testbed.ssh("gpu01", "cat /root/.bashrc", check=True).stdout
    assert bashrc == Path("/etc/skel/.bashrc").read_text()


def test_fake_gpus_are_character_devices_on_compute_nodes(testbed: Testbed) -> None:
    out = testbed.run("gpu01", "stat -c '%n %F %t' /dev/nvidia0 /dev/nvidia7 /dev/nvidiactl", check=True).stdout
    assert out.splitlines() == [f"/dev/{d} character special file c3" for d in ("nvidia0", "nvidia7", "nvidiactl")]
    assert testbed.run("ctl", "test -e /dev/nvidia0").returncode == 1


# ------------------------------------------------------------------------------------------ Slurm


def test_sinfo_shows_the_compute_nodes_idle(testbed: Testbed) -> None:
    testbed.wait_idle()
    out = testbed.ssh("ctl", "sinfo -h -N -o '%N %P %t'", check=True).stdout
    assert sorted(out.splitlines()) == [f"{n} debug* idle" for n in testbed.computes]


def test_srun_on_two_nodes_prints_both_names(testbed: Testbed) -> None:
    out = testbed.ssh("ctl", "srun -N2 -w gpu[01-02] hostname", check=True, timeout=60).stdout
    assert sorted(out.split()) == ["gpu01", "gpu02"]


def test_srun_with_two_gpus_sets_cuda_visible_devices(testbed: Testbed) -> None:
    out = testbed.ssh("ctl", "srun --gres=gpu:2 env", check=True, timeout=60).stdout
    assert "CUDA_VISIBLE_DEVICES=0,1" in out.splitlines()


def test_supervisorctl_restart_slurmd_restarts_only_that_node(testbed: Testbed) -> None:
    before = {n: testbed.host_pids(n, "slurmd") for n in testbed.computes}
    assert all(len(p) == 1 for p in before.values()), before
    ctld = testbed.host_pids("ctl", "slurmctld")
    out = testbed.ssh("gpu01", "supervisorctl restart slurmd", check=True).stdout
    assert "slurmd: started" in out
    after = {n: testbed.host_pids(n, "slurmd") for n in testbed.computes}
    assert after["gpu01"] != before["gpu01"] and len(after["gpu01"]) == 1
    assert {n: p for n, p in after.items() if n != "gpu01"} == {n: p for n, p in before.items() if n != "gpu01"}
    assert testbed.host_pids("ctl", "slurmctld") == ctld
    testbed.wait_idle()


# ------------------------------------------------------------------------------------------ stand-ins


def test_nfs_standin_binds_an_exported_directory_idempotently(testbed: Testbed) -> None:
    testbed.run("ctl", "mkdir -p /srv/tbshare /etc/exports.d && echo '/srv/tbshare *(rw,no_subtree_check)' "
                "> /etc/exports.d/tb.exports && exportfs -ra", check=True)
    try:
        mount = "mkdir -p /tbshare && mount -t nfs ctl:/srv/tbshare /tbshare"
        testbed.ssh("gpu01", f"{mount} && {mount} && echo from-gpu01 > /tbshare/f", check=True)
        assert testbed.ssh("gpu01", "grep -c ' /tbshare ' /proc/self/mountinfo").stdout.strip() == "1"
        assert testbed.ssh("ctl", "cat /srv/tbshare/f", check=True).stdout == "from-gpu01\n"
        assert testbed.ssh("gpu02", f"{mount} && cat /tbshare/f", check=True).stdout == "from-gpu01\n"
        info = testbed.ssh("gpu02", "grep ' /tbshare ' /proc/self/mountinfo", check=True).stdout.split()
        assert info[3] == "/srv/tbshare" and info[info.index("-") + 2] == "ctl:/"
        denied = testbed.ssh("gpu02", "mkdir -p /x && mount -t nfs ctl:/srv/other /x")
        assert denied.returncode == 32
        assert "access denied by server while mounting ctl:/srv/other" in denied.stderr
        testbed.ssh("gpu02", "umount /tbshare && ! grep -q ' /tbshare ' /proc/self/mountinfo", check=True)
    finally:
        for node in ("gpu01", "gpu02"):
            testbed.run(node, "umount /tbshare; umount /tbshare")
        testbed.run("ctl", "rm -f /etc/exports.d/tb.exports; exportfs -ra")


def test_nfs_standin_needs_exportfs_like_a_real_server(testbed: Testbed) -> None:
    testbed.run("ctl", "mkdir -p /srv/unexported && echo '/srv/unexported *(rw)' >> /etc/exports", check=True)
    try:
        proc = testbed.ssh("gpu01", "mkdir -p /unexp && mount -t nfs ctl:/srv/unexported /unexp")
        assert proc.returncode == 32 and "access denied" in proc.stderr
    finally:
        testbed.run("ctl", "sed -i '/^\\/srv\\/unexported /d' /etc/exports")


def test_enroot_standin_imports_once_and_rejects_bad_uris(testbed: Testbed) -> None:
    out = f"/tmp/img-{uuid.uuid4().hex}.sqsh"
    uri = "docker://nvcr.io#nvidia/pytorch:24.04-py3"
    testbed.ssh("ctl", f"enroot import -o {out} '{uri}'", check=True)
    assert testbed.ssh("ctl", f"unsquashfs -cat {out} etc/enroot-standin-uri", check=True).stdout == uri + "\n"
    again = testbed.ssh("ctl", f"enroot import -o {out} '{uri}'")
    assert again.returncode == 1 and f"[ERROR] File already exists: {out}" in again.stderr
    bad = testbed.ssh("ctl", "enroot import -o /tmp/bad.sqsh 'docker://nvcr.io#nvidia/PyTorch:24.04'")
    assert bad.returncode == 1 and "[ERROR] Invalid image reference" in bad.stderr
    assert testbed.ssh("ctl", "test -e /tmp/bad.sqsh").returncode == 1
    assert testbed.ssh("ctl", "enroot version", check=True).stdout.strip()
    assert not Path("/usr/bin/enroot").exists() or "STAND-IN" not in Path("/usr/bin/enroot").read_text()


# ------------------------------------------------------------------------------------------ CLI


def test_up_is_idempotent(testbed: Testbed) -> None:
    pids = {n: testbed.pid1(n) for n in testbed.nodes}
    proc = subprocess.run([str(TESTBED), "up", "--name", testbed.name, "--subnet", testbed.subnet,
                           "--nodes", str(len(testbed.computes))], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == testbed.up_output.splitlines()[-1] == str(testbed.desired_state)
    assert all(Path(f"/proc/{pid}").exists() for pid in pids.values())
    status = subprocess.run([str(TESTBED), "status", "--name", testbed.name], capture_output=True, text=True)
    assert status.returncode == 0 and "gpu01" in status.stdout


def test_desired_state_validates(testbed: Testbed) -> None:
    pytest.importorskip("reconciler.cli.main")
    proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", str(testbed.desired_state)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nodes_yaml = (testbed.desired_state / "nodes.yaml").read_text()
    assert str(testbed.ssh_config) in nodes_yaml and str(testbed.known_hosts) in nodes_yaml


# ------------------------------------------------------------------------------------------ --bare and down


def test_bare_testbed_has_no_slurm_but_sshd_and_munge(testbed_factory: Callable[..., Testbed]) -> None:
    bed = testbed_factory(nodes=1, bare=True)
    for node in bed.nodes:
        assert bed.ssh(node, "hostname", check=True).stdout.strip() == node
        assert bed.run(node, "test -e /etc/slurm/slurm.conf").returncode == 1
        assert bed.host_pids(node, "slurmd") == [] and bed.host_pids(node, "slurmctld") == []
        assert bed.host_pids(node, "munged") and bed.host_pids(node, "sshd")
        bed.run(node, "munge -n | unmunge >/dev/null", check=True)
    status = bed.ssh("gpu01", "supervisorctl status slurmd").stdout
    assert "STOPPED" in status
    cred = bed.run("gpu01", "munge -n", check=True).stdout
    assert "STATUS:          Success" in bed.run("ctl", f"echo '{cred.strip()}' | unmunge").stdout


def test_down_leaves_no_process_namespace_mount_or_file(testbed_factory: Callable[..., Testbed],
                                                      tmp_path: Path) -> None:
    bed = testbed_factory(nodes=1)
    netns = {os.stat(f"/run/netns/{bed.name}-{n}").st_ino for n in [*bed.nodes, "admin"]}
    pidns = {os.stat(f"/proc/{bed.pid1(n)}/ns/pid").st_ino for n in bed.nodes}
    control = tmp_path / "cm"
    master = ["-o", "ControlMaster=yes", "-o", f"ControlPath={control}", "-o", "ControlPersist=300"]
    subprocess.run(["ssh", "-F", str(bed.ssh_config), *master, "-fN", "gpu01"], check=True, timeout=30)
    assert bed.ssh("gpu01", "hostname", options=("-o", f"ControlPath={control}"), check=True).stdout == "gpu01\n"
    assert host_processes_in(netns, pidns)
    bed.down()
    assert host_processes_in(netns, pidns) == []
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert [n for n in names if n.startswith(f"{bed.name}-")] == []
    assert str(bed.state_dir) not in Path("/proc/self/mountinfo").read_text()
    assert not bed.state_dir.exists()
    assert not control.exists() or subprocess.run(["ssh", "-O", "check", "-o", f"ControlPath={control}",
                                                    "gpu01"], capture_output=True).returncode != 0
