"""kernel: on the testbed (2 compute nodes, real sshd, the STAND-IN modprobe of deploy/testbed/modules_standin.py
over a node-local /sys/module; sysctls are the kernel's own, net.* being per network namespace):

- a module option and a sysctl applied: the module loaded with its option, the live values checked on the nodes;
  the second plan is empty;
- a hand `sysctl -w` on one node is drift: shown by plan, healed by apply;
- a module option changed on a loaded module is planned "needs a driver reload", held by a plain apply, applied
  only with `--allow driver-reload` (the live value then equal), and the plan after it is empty;
- a node cannot write a sysctl of the host's kernel (vm.*): its /proc/sys is read-only but for net.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[3]
NODES = ("gpu01", "gpu02")
PARAM = "/sys/module/nvidia_standin/parameters/NVreg_EnableGpuFirmware"
KEEPALIVE = "/proc/sys/net/ipv4/tcp_keepalive_time"
KERNEL = """\
kernel:
  modules:
    - nodes: "gpu[01-02]"
      name: nvidia-standin
      state: loaded
      options: {{NVreg_EnableGpuFirmware: "{firmware}"}}
  sysctls:
    - roles: [compute]
      values: {{net.ipv4.tcp_keepalive_time: {keepalive}, net.ipv4.tcp_rmem: "4096 87380 6291456"}}
"""


@dataclass
class Site:
    """The testbed and a desired-state copy whose kernel.yaml each test rewrites."""

    bed: Testbed
    desired: Path

    def kernel(self, firmware: int = 0, keepalive: int = 600) -> None:
        (self.desired / "kernel.yaml").write_text(KERNEL.format(firmware=firmware, keepalive=keepalive))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, str(self.desired)],
                              capture_output=True, text=True, timeout=300, cwd=REPO)

    def sh(self, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.bed.ssh(node, command, check=check, timeout=120)


@pytest.fixture(scope="module")
def site(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Site:
    bed = testbed_factory(nodes=2, bare=False)
    desired = tmp_path_factory.mktemp("kernel") / "desired"
    shutil.copytree(bed.desired_state, desired)
    return Site(bed=bed, desired=desired)


def out(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


def test_01_module_option_and_sysctl_applied_live_values_checked_second_plan_empty(site: Site) -> None:
    for node in NODES:
        assert site.sh(node, "test -d /sys/module/nvidia_standin", check=False).returncode == 1
    site.kernel(firmware=0, keepalive=600)
    plan = site.cli("plan")
    assert plan.returncode == 2, out(plan)
    assert "net.ipv4.tcp_keepalive_time: live 7200, desired 600" in plan.stdout, plan.stdout
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, out(applied)
    for node in NODES:
        assert site.sh(node, f"cat {PARAM}").stdout == "0\n"  # loaded with the option from our modprobe.d file
        assert site.sh(node, f"cat {KEEPALIVE}").stdout == "600\n"
        assert site.sh(node, "cat /proc/sys/net/ipv4/tcp_rmem").stdout.split() == ["4096", "87380", "6291456"]
        conf = site.sh(node, "cat /etc/modprobe.d/reconciler-nvidia-standin.conf").stdout
        assert conf.endswith("options nvidia-standin NVreg_EnableGpuFirmware=0\n"), conf
        assert "net.ipv4.tcp_keepalive_time = 600\n" in site.sh(node, "cat /etc/sysctl.d/90-reconciler.conf").stdout
    again = site.cli("plan")
    assert again.returncode == 0 and "no changes" in again.stdout, out(again)


def test_02_hand_sysctl_is_drift_shown_and_healed(site: Site) -> None:
    site.sh("gpu01", "sysctl -w net.ipv4.tcp_keepalive_time=7300")
    plan = site.cli("plan")
    assert plan.returncode == 2, out(plan)
    assert "net.ipv4.tcp_keepalive_time: live 7300, desired 600" in plan.stdout, plan.stdout
    assert "gpu02" not in "\n".join(line for line in plan.stdout.splitlines() if "tcp_keepalive" in line)
    healed = site.cli("apply", "--yes")
    assert healed.returncode == 0, out(healed)
    assert site.sh("gpu01", f"cat {KEEPALIVE}").stdout == "600\n"
    assert site.cli("plan").returncode == 0


def test_03_option_change_needs_a_driver_reload_and_is_applied_only_when_allowed(site: Site) -> None:
    site.kernel(firmware=1, keepalive=600)
    plan = site.cli("plan")
    assert plan.returncode == 2, out(plan)
    assert "NVreg_EnableGpuFirmware: live 0, desired 1 (needs a driver reload)" in plan.stdout, plan.stdout
    held = site.cli("apply", "--yes")
    assert held.returncode == 2, out(held)  # applied what it could, held the reloads
    assert "HELD gpu[01-02]" in held.stderr and "--allow driver-reload" in held.stderr, out(held)
    for node in NODES:
        assert site.sh(node, f"cat {PARAM}").stdout == "0\n"  # not reloaded
        assert "NVreg_EnableGpuFirmware=1" in site.sh(node, "cat /etc/modprobe.d/reconciler-nvidia-standin.conf").stdout
    still = site.cli("plan")
    assert still.returncode == 2 and "(needs a driver reload)" in still.stdout, out(still)
    allowed = site.cli("apply", "--yes", "--allow", "driver-reload")
    assert allowed.returncode == 0, out(allowed)
    for node in NODES:
        assert site.sh(node, f"cat {PARAM}").stdout == "1\n"
    again = site.cli("plan")
    assert again.returncode == 0 and "no changes" in again.stdout, out(again)


def test_04_a_node_cannot_write_a_host_sysctl(site: Site) -> None:
    before = Path("/proc/sys/vm/swappiness").read_text()
    other = "1" if before.strip() != "1" else "2"
    result = site.sh("gpu01", f"sysctl -w vm.swappiness={other}", check=False)
    assert result.returncode != 0 and 'permission denied on key "vm.swappiness"' in result.stderr, out(result)
    result = site.sh("gpu01", f"echo {other} > /proc/sys/vm/swappiness", check=False)
    assert result.returncode != 0 and "Read-only file system" in result.stderr, out(result)
    assert Path("/proc/sys/vm/swappiness").read_text() == before
    unknown = site.sh("gpu01", "modprobe no-such-module", check=False)
    assert unknown.returncode == 1 and "FATAL: Module no-such-module not found in directory" in unknown.stderr
