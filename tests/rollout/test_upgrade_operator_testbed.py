"""The operator's commands on a running daemon's upgrade, on the testbed (issue 46 item 4 must-show): real
`reconciler run` daemons over real SSH, real Slurm 22.05 (`scontrol reboot` through its RebootProgram), real apt/dpkg,
the testbed's reboots, a real SQLite state database; the NVIDIA packages and nvidia-smi are the testbed's STAND-INS.

3 nodes go from the old stand-in pair to the new one, one at a time, gated by gpu and a site `command` that fails
while /etc/op-broken exists (made on gpu01: it fails after its reboot). While gpu01 is in flight the operator pauses
the upgrade and skips gpu03 (the daemon stopped with SIGSTOP first, so neither can take effect before the restart);
the daemon is killed and started again.
The restarted daemon finishes gpu01 (failed by the command gate), starts nothing else while paused, and skips gpu03.
The operator fixes gpu01 (removes the file) and retries it; the daemon is restarted again; then resume: gpu01 passes
this time, gpu02 goes, the rollout ends with gpu03 on the old version, reported skipped, by whom and why.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.daemon.harness import DaemonProcess, GitRemote
from tests.rollout.conftest import journal
from tests.rollout.upgrade_bed import DRIVER, cli, daemon, package_bed, pair, seeded, versions
from tests.testbed_fixture import Testbed

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(900)]
NODES = ["gpu01", "gpu02", "gpu03"]
UPGRADE = """rollout:
  waves: all
  upgrade:
    max_unavailable: 1
    failure_budget: 1
    drain_timeout: 2m
    reboot_timeout: 4m
    driver_package: nvidia-driver-standin
    gates: [gpu, {command: "test ! -e /etc/op-broken", name: site-check}]
"""
SMI = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


def states(state_dir: Path) -> dict[str, str]:
    """Node -> upgrade state, from the daemon's rollout journal."""
    nodes = ((journal(state_dir) or {}).get("upgrade") or {}).get("nodes") or {}
    return {n: str(e.get("state")) for n, e in nodes.items()}


def freeze(daemon: DaemonProcess) -> None:
    """SIGSTOP the daemon (it acts on nothing more until killed): a command given now takes effect only after the
    restart, whatever the daemon's poll would have made of it."""
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGSTOP)


def op(state_dir: Path, *args: str) -> str:
    """`reconciler upgrade ARGS` beside the daemon; its output (asserted to succeed)."""
    done = cli("upgrade", *args, "--state-dir", str(state_dir), "--who", "alice")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """3 compute nodes, Slurm 22.05, the package repository."""
    return package_bed(testbed_factory, len(NODES))


def test_pause_skip_retry_on_a_running_daemon_each_surviving_a_restart(bed: Testbed, tmp_path: Path) -> None:
    old, new = versions(bed)
    remote = GitRemote.create(tmp_path, seeded(bed, tmp_path, pair(old, "gpu[01-03]")))
    bed.run("gpu01", "touch /etc/op-broken", check=True)
    boot03 = bed.run("gpu03", BOOT_ID, check=True).stdout
    state_dir = tmp_path / "state"

    one = daemon(tmp_path, remote, state_dir, 1)
    try:
        one.wait_applied(remote.head(), timeout=180)
        target = remote.commit("driver pair old -> new, node by node",
                               {"rollout.yaml": lambda _: UPGRADE,
                                "packages.yaml": lambda _: pair(new, "gpu[01-03]", "reboot")})
        flying = one.wait_for("a node in flight", lambda: [n for n, s in states(state_dir).items()
                                                           if s not in ("upgrade-required", "done", "failed")], 300)
        assert flying == ["gpu01"], states(state_dir)  # all idle: in order
        freeze(one)  # so that the restart surely comes between the commands and their effect
        assert "paused" in op(state_dir, "pause", "--reason", "switch firmware")
        assert "asked" in op(state_dir, "skip", "gpu03", "--reason", "vendor ticket 42")
    finally:
        one.kill()  # between the commands and their effect
    assert states(state_dir)["gpu03"] == "upgrade-required"

    two = daemon(tmp_path, remote, state_dir, 2)
    try:
        two.wait_for("gpu01 failed by the site check", lambda: states(state_dir).get("gpu01") == "failed", 400)
        two.wait_for("gpu03 skipped", lambda: states(state_dir).get("gpu03") == "skipped", 30)
        upgrade = (journal(state_dir) or {})["upgrade"]
        assert upgrade["waiting"]["kind"] == "hold", upgrade
        assert upgrade["waiting"]["why"].startswith("paused by the operator (alice: switch firmware)"), upgrade
        text = cli("status", "--state-dir", str(state_dir)).stdout
        assert "PAUSED: paused by the operator (alice: switch firmware)" in text, text
        assert "skipped by the operator (alice: vendor ticket 42)" in text, text
        time.sleep(5)  # the machine polls every second: five passes, nothing starts
        assert states(state_dir)["gpu02"] == "upgrade-required"
        reason = bed.run("ctl", "scontrol show node -o gpu01", check=True).stdout
        assert "site-check" in reason and "DRAIN" in reason, reason
        bed.run("gpu01", "rm -f /etc/op-broken", check=True)  # a human fixed it
        freeze(two)
        assert "again" in op(state_dir, "retry", "gpu01", "--reason", "cable reseated")
    finally:
        two.kill()  # between the retry and its effect
    assert states(state_dir)["gpu01"] == "failed"

    three = daemon(tmp_path, remote, state_dir, 3)
    try:
        three.wait_for("gpu01 retried", lambda: states(state_dir).get("gpu01") == "upgrade-required", 120)
        assert states(state_dir)["gpu02"] == "upgrade-required"  # still paused
        assert "resumed" in op(state_dir, "resume")
        three.wait_applied(target, timeout=500)
        status = three.status()
    finally:
        three.stop()

    nodes = {n: e["state"] for n, e in status["upgrade"]["nodes"].items()}
    assert nodes == {"gpu01": "done", "gpu02": "done", "gpu03": "skipped"}, status["upgrade"]
    history = [(h["op"], h.get("node"), h["effect"].split(":")[0]) for h in status["upgrade_operator"]["history"]]
    assert history == [("pause", None, "paused"), ("skip", "gpu03", "skipped"), ("retry", "gpu01", "retried"),
                       ("resume", None, "resumed")], json.dumps(status["upgrade_operator"])
    for node in ("gpu01", "gpu02"):
        assert new.rsplit("-", 1)[0] in bed.run(node, SMI, check=True).stdout, node
        state = bed.run("ctl", f"scontrol show node -o {node}", check=True).stdout
        assert "DRAIN" not in state.split("Reason=")[0], state  # gpu01: its own drain, resumed after the retry
    assert bed.run("gpu03", BOOT_ID, check=True).stdout == boot03  # skipped: never rebooted
    installed = bed.run("gpu03", f"dpkg-query -W -f='${{Version}}' {DRIVER}", check=True).stdout
    assert installed == old, installed


def test_retry_after_the_rollout_ended_puts_the_fixed_node_through_the_upgrade_again(bed: Testbed,
                                                                                      tmp_path: Path) -> None:
    """gpu03 fails its site check (within failure_budget 1): the rollout ends, gpu03 stays drained for a human.
    The human fixes it and retries it; the daemon's next cycle, with no rollout in flight, runs the upgrade machine
    for gpu03 alone (daemon/loop_retry.py): its gates pass, it is resumed, status says done."""
    old, new = versions(bed)
    remote = GitRemote.create(tmp_path, seeded(bed, tmp_path, pair(old, "gpu03")))
    bed.run("gpu03", "touch /etc/op-broken", check=True)
    state_dir = tmp_path / "state"
    one = daemon(tmp_path, remote, state_dir, 1)
    try:
        one.wait_applied(remote.head(), timeout=180)
        target = remote.commit("driver pair old -> new on gpu03",
                               {"rollout.yaml": lambda _: UPGRADE,
                                "packages.yaml": lambda _: pair(new, "gpu03", "reboot")})
        one.wait_applied(target, timeout=500)  # ended: gpu03 failed, within the failure budget
        status = one.status()
        assert status["upgrade"]["nodes"]["gpu03"]["state"] == "failed", status["upgrade"]
        assert "site-check" in bed.run("ctl", "scontrol show node -o gpu03", check=True).stdout
        bed.run("gpu03", "rm -f /etc/op-broken", check=True)  # a human fixed it
        said = op(state_dir, "retry", "gpu03", "--reason", "fan replaced")
        assert "no upgrade is in flight; the daemon's next cycle puts it through the upgrade again" in said, said
        one.wait_for("gpu03 done after the retry",
                     lambda: (one.status().get("upgrade") or {}).get("nodes", {}).get("gpu03", {}).get("state")
                     == "done", 400)
        status = one.status()
    finally:
        one.stop()
    node = bed.run("ctl", "scontrol show node -o gpu03", check=True).stdout
    assert "DRAIN" not in node.split("Reason=")[0], node  # its own drain, resumed after the gates
    assert new.rsplit("-", 1)[0] in bed.run("gpu03", SMI, check=True).stdout
    history = [(h["op"], h.get("node"), h["effect"].split(":")[0]) for h in status["upgrade_operator"]["history"]]
    assert history == [("retry", "gpu03", "retried")], json.dumps(status["upgrade_operator"])
    log = (tmp_path / "daemon1.log").read_text()
    assert "retrying gpu03 of commit" in log and "after a restart" not in log, log[-3000:]
