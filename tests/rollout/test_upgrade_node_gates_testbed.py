"""Issue 46 item 5 on the testbed (real Slurm 22.05, real apt/dpkg over real SSH, the reboot through Slurm's
RebootProgram; the driver packages, nvidia-smi and NHC are the testbed's STAND-INS: deploy/testbed/standins/nhc
answers as LBNL NHC does): after the reboot the gates run in the order `gates` lists them, on the drained node.
A site's command gate that fails keeps its node drained with the command's output in the reason; NHC runs where
the node has it (told to leave Slurm's node state alone) and its failure keeps that node drained with NHC's
message, before the command gate runs; the node that passes everything is resumed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.rollout.upgrade_bed import REPO, cli, field, package_bed, pair, seeded, versions
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
NHC = (REPO / "deploy" / "testbed" / "standins" / "nhc").read_text()
MARK = "/run/site-check-ran"  # the command gate leaves it, so the test sees which nodes it ran on
CHECK = f"touch {MARK}; test ! -e /etc/site-check-fail || {{ cat /etc/site-check-fail; exit 1; }}"
UPGRADE = f"""rollout:
  waves: all
  upgrade:
    max_unavailable: 3
    failure_budget: 2
    drain_timeout: 2m
    reboot_timeout: 2m
    driver_package: nvidia-driver-standin
    nhc_timeout: 1m
    gates: [gpu, nhc, {{command: "{CHECK}", name: site-check, timeout: 30s}}]
"""


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Iterator[Testbed]:
    """3 compute nodes, Slurm 22.05, the package repository."""
    testbed = package_bed(testbed_factory, 3)
    yield testbed
    testbed.down()


def install_nhc(bed: Testbed, node: str, fails: str | None = None) -> None:
    """The NHC stand-in as NODE's /usr/sbin/nhc; FAILS: the message its one check fails with."""
    bed.run(node, f"cat > /usr/sbin/nhc <<'EOF_NHC'\n{NHC}EOF_NHC\nchmod 755 /usr/sbin/nhc; mkdir -p /etc/nhc; "
                  "rm -f /var/log/nhc-standin.log", check=True)
    if fails:
        bed.run(node, f"printf '%s\\n' '{fails}' > /etc/nhc/standin-fail", check=True)


def test_gates_in_order_a_failing_command_and_a_failing_nhc_keep_their_nodes_drained_with_the_output(
        bed: Testbed, tmp_path: Path) -> None:
    old, new = versions(bed)
    desired = seeded(bed, tmp_path, pair(old, "gpu[01-03]"))

    install_nhc(bed, "gpu01")  # has NHC, passes
    bed.run("gpu02", "rm -f /usr/sbin/nhc; echo 'ib0: link down, want 400 Gb/s' > /etc/site-check-fail",
            check=True)  # no NHC; the site's check fails
    install_nhc(bed, "gpu03", fails="check_fs_mount_rw:  /scratch not mounted")  # NHC fails first
    (desired / "rollout.yaml").write_text(UPGRADE)
    (desired / "packages.yaml").write_text(pair(new, "gpu[01-03]", "reboot"))
    plan = cli("plan", str(desired))
    assert "gated by gpu, nhc, command:site-check (rollout.upgrade)" in plan.stdout, plan.stdout
    done = cli("apply", "--yes", str(desired))
    output = done.stdout + done.stderr

    def shown(node: str) -> str:
        return bed.run("ctl", f"scontrol show node {node} -o", check=True).stdout

    gpu01, gpu02, gpu03 = shown("gpu01"), shown("gpu02"), shown("gpu03")
    assert "DRAIN" not in field(gpu01, "State") and output.count("upgrade: gpu01: resumed") == 1, (gpu01, output)
    assert bed.run("gpu01", "cat /var/log/nhc-standin.log", check=True).stdout.split() == [
        "-l", "-", "-t", "60", "MARK_OFFLINE=0", "DETACHED_MODE=0"]
    assert bed.run("gpu01", f"test -e {MARK}").returncode == 0  # every gate ran: nhc, then the command

    assert "DRAIN" in field(gpu02, "State"), gpu02
    assert "command gate site-check: exit 1: ib0: link down, want 400 Gb/s" in field(gpu02, "Reason"), gpu02
    assert "upgrade: gpu02: nhc is not installed: not run" in output, output

    assert "DRAIN" in field(gpu03, "State"), gpu03
    assert "nhc gate: exit 1: check_fs_mount_rw: /scratch not mounted" in field(gpu03, "Reason"), gpu03
    assert bed.run("gpu03", f"test -e {MARK}").returncode != 0  # nhc failed first: the command never ran
    for node in ("gpu02", "gpu03"):
        assert f"upgrade: {node}: resumed" not in output, output
        smi = bed.run(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader", check=True).stdout
        assert set(smi.split()) == {new.rsplit("-", 1)[0]}, (node, smi)  # upgraded, only the gate failed
    # the apply says the two nodes failed and stay drained, and exits 1 (not "complete" and nothing else)
    assert done.returncode == 1, output
    assert "2 node(s) failed the upgrade (within failure_budget) and stay drained for a human" in output, output
    for node, gate in (("gpu02", "command gate site-check"), ("gpu03", "nhc gate")):
        assert f"FAILED {node}: upgrade: {gate}" in output and "(left drained for a human)" in output, output
