"""kernel: at load: names, keys and values that could break out of a modprobe.d or sysctl.d line, or reach a
path outside /sys/module and /proc/sys, are errors with file:line and key path; so are entries that clash."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.desired.loader import DesiredStateError, load_dir
from tests.drivers.base_state import write_state


def errors(tmp_path: Path, desired: str) -> list[str]:
    with pytest.raises(DesiredStateError) as info:
        load_dir(write_state(tmp_path / "repo", desired))
    return [f"{e.location.file}:{e.location.line} {e.key_path()}: {e.message}" if e.location else str(e)
            for e in info.value.errors]


@pytest.mark.parametrize(("entry", "where", "says"), [
    ('{nodes: gpu01, name: "nvidia;reboot"}', "kernel.modules[0].name", "not a kernel module name"),
    ('{nodes: gpu01, name: "-r"}', "kernel.modules[0].name", "not a kernel module name"),
    ('{nodes: gpu01, name: "../../etc"}', "kernel.modules[0].name", "not a kernel module name"),
    ('{nodes: gpu01, name: nvidia, options: {"a b": 1}}', "kernel.modules[0].options", "not a module parameter"),
    ('{nodes: gpu01, name: nvidia, options: {X: "1 install nvidia /bin/sh"}}', "kernel.modules[0].options",
     "not a module parameter value"),
    ('{nodes: gpu01, name: nvidia, options: {X: true}}', "kernel.modules[0].options", "a boolean is ambiguous"),
    ('{nodes: gpu01, name: nvidia, state: unloaded}', "kernel.modules[0].state", ""),
    ('{name: nvidia}', "kernel.modules[0]", "say which nodes"),
])
def test_bad_module_entries(tmp_path: Path, entry: str, where: str, says: str) -> None:
    got = errors(tmp_path, f"kernel:\n  modules:\n    - {entry}\n")
    assert any(g.startswith(f"files.yaml:3 {where}") and says in g for g in got), got


@pytest.mark.parametrize(("values", "says"), [
    ('{"net/ipv4/tcp_syncookies": 1}', "not a sysctl key"),
    ('{"net.ipv4..x": 1}', "not a sysctl key"),
    ('{"net.ipv4.x=1 kernel.y": 1}', "not a sysctl key"),
    ('{"kernel": 1}', "not a sysctl key"),
    ('{net.ipv4.tcp_syncookies: "1\\nkernel.core_pattern = |/tmp/x"}', ""),
    ('{net.ipv4.tcp_syncookies: "1\\n2"}', "control or invisible character"),
    ('{net.ipv4.tcp_syncookies: "1 = 2"}', "not a sysctl value"),
    ('{net.ipv4.tcp_syncookies: "1 # off"}', "not a sysctl value"),
    ('{net.ipv4.tcp_syncookies: "  "}', "empty sysctl value"),
    ('{net.ipv4.tcp_syncookies: true}', "a boolean is ambiguous"),
])
def test_bad_sysctls(tmp_path: Path, values: str, says: str) -> None:
    got = errors(tmp_path, f"kernel:\n  sysctls:\n    - nodes: gpu01\n      values: {values}\n")
    assert any(g.startswith("files.yaml:") and "kernel.sysctls[0].values" in g and says in g for g in got), got
    assert len(got) == 1, got


def test_one_sysctl_two_values_on_a_node(tmp_path: Path) -> None:
    got = errors(tmp_path, """\
kernel:
  sysctls:
    - {roles: [compute], values: {net.core.somaxconn: 1024}}
    - {nodes: "gpu02,cpu01", values: {net.core.somaxconn: 4096}}
    - {nodes: gpu01, values: {net.core.somaxconn: 1024}}
""")
    assert got == ["files.yaml:4 kernel.sysctls[1].values.net.core.somaxconn: net.core.somaxconn on node gpu02 "
                   "is '1024' in kernel.sysctls[0] and '4096' here"]


def test_one_module_in_two_entries_on_a_node_and_unknown_nodes(tmp_path: Path) -> None:
    got = errors(tmp_path, """\
kernel:
  modules:
    - {roles: [compute], name: nvidia-standin, state: loaded}
    - {nodes: "gpu02,gpu09", name: nvidia_standin, options: {X: 1}}
""")
    assert sorted(got) == [
        "files.yaml:4 kernel.modules[1].name: module nvidia_standin on node gpu02 is also in kernel.modules[0]",
        "files.yaml:4 kernel.modules[1].nodes: unknown nodes: gpu09"], got


def test_files_entry_writing_a_kernel_file_is_refused(tmp_path: Path) -> None:
    got = errors(tmp_path, """\
files:
  - {path: /etc/sysctl.d/90-reconciler.conf, nodes: gpu01, content: "x = 1\\n"}
kernel:
  sysctls:
    - {nodes: gpu01, values: {net.core.somaxconn: 1024}}
""")
    assert got == ["files.yaml:2 files[0].path: /etc/sysctl.d/90-reconciler.conf is managed by kernel.sysctls: "
                   "not a place for files:"]


def test_a_good_kernel_section_loads(tmp_path: Path) -> None:
    state = load_dir(write_state(tmp_path / "repo", """\
kernel:
  modules:
    - {nodes: "gpu[01-02]", name: nvidia-standin, state: loaded, options: {NVreg_EnableGpuFirmware: 0}}
  sysctls:
    - {roles: [compute], values: {net.ipv4.tcp_rmem: "4096   87380\\t6291456", net.core.somaxconn: 4096}}
""")).state
    assert state.kernel.modules[0].options == {"NVreg_EnableGpuFirmware": "0"}
    assert state.kernel.sysctls[0].values == {"net.ipv4.tcp_rmem": "4096 87380 6291456",
                                              "net.core.somaxconn": "4096"}
