"""kernel.modules and kernel.sysctls drivers: facts (files, live /sys/module and /proc/sys values) -> changes,
their commands and what they need (a driver reload, a reboot)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.drivers import kernel_live
from reconciler.drivers.kernel_live import LiveModules, LiveSysctls
from reconciler.drivers.kernel_modules import FACTS_KEY as MODULES_KEY
from reconciler.drivers.kernel_modules import KernelModulesDriver
from reconciler.drivers.sysctls import FACTS_KEY as SYSCTLS_KEY
from reconciler.drivers.sysctls import SysctlsDriver
from reconciler.engine.context import Context
from reconciler.engine.gather import build_request
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import make_plan
from reconciler.facts.models import ClusterFacts, FileFact, NodeFacts
from tests.drivers.base_state import write_state

DRIVERS = [KernelModulesDriver(), SysctlsDriver()]
CONF = "/etc/modprobe.d/reconciler-nvidia-standin.conf"
SYSCTL = "/etc/sysctl.d/90-reconciler.conf"
KEEPALIVE = "/proc/sys/net/ipv4/tcp_keepalive_time"
NV = "/sys/module/nvidia_standin"
OURS = "# x: managed by reconciler from somewhere.\n# Do not edit by hand: the reconciler reports and reverts.\n"


def fact(content: str) -> FileFact:
    return FileFact(exists=True, content=content, sha256=hashlib.sha256(content.encode()).hexdigest(),
                    mode="0644", owner="root", group="root", size=len(content))


def plan_for(tmp_path: Path, desired: str, files: dict[str, str] | None = None,
             live: dict[str, Any] | None = None, listing: dict[str, str] | None = None,
             nodes: tuple[str, ...] = ("gpu01",), unanswered: tuple[str, ...] = ()) -> Plan:
    """Plan DESIRED (kernel: ...) with the same FILES and LIVE values (path -> text, None: absent) on NODES;
    UNANSWERED nodes have no live answer at all."""
    ctx = Context(loaded=load_dir(write_state(tmp_path / "repo", desired)), source="test")
    facts = ClusterFacts(controller=ctx.controller)
    for name in node_specs(ctx.state):
        node = NodeFacts(node=name, reachable=True)
        for path in build_request(ctx, name, DRIVERS).files:
            text = (files or {}).get(path) if name in nodes else None
            node.files[path] = fact(text) if text is not None else FileFact(exists=False)
        facts.nodes[name] = node
        if name in unanswered:
            continue
        values = dict(live or {}) if name in nodes else {}
        facts.keep(name, LiveSysctls(values))
        facts.keep(name, LiveModules({**values, "listing": dict(listing or {})}))
    ctx.facts = facts
    return make_plan(ctx, DRIVERS)


def changing(plan: Plan, node: str = "gpu01") -> list[Change]:
    return [c for c in plan.changes if c.node == node and c.action != "ok"]


def commands(change: Change) -> list[str]:
    return [op.command for op in change.ops if isinstance(op, RunCommand)]


SYSCTLS = """\
kernel:
  sysctls:
    - nodes: "gpu[01-02]"
      values: {net.ipv4.tcp_keepalive_time: 600, net.ipv4.tcp_rmem: "4096  87380 6291456"}
"""
RMEM = "/proc/sys/net/ipv4/tcp_rmem"


def test_sysctl_file_and_live_value_set_without_consequence(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, SYSCTLS, live={KEEPALIVE: "7200\n", RMEM: "4096\t87380\t6291456\n"})
    file, live = changing(plan)
    assert (file.resource, file.action) == (SYSCTL, "create")
    write = file.ops[0]
    assert isinstance(write, WriteFile)
    assert write.content.endswith("net.ipv4.tcp_keepalive_time = 600\nnet.ipv4.tcp_rmem = 4096 87380 6291456\n")
    assert "managed by reconciler" in write.content.splitlines()[0]
    assert live.summary == "net.ipv4.tcp_keepalive_time: live 7200, desired 600" and live.needs is None
    assert commands(live) == ["sysctl -w net.ipv4.tcp_keepalive_time=600"]
    assert live.restore is not None and commands(live.restore) == ["sysctl -w net.ipv4.tcp_keepalive_time=7200"]


def test_sysctl_tabs_and_spaces_compare_equal_and_a_converged_node_plans_nothing(tmp_path: Path) -> None:
    body = "net.ipv4.tcp_keepalive_time = 600\nnet.ipv4.tcp_rmem = 4096 87380 6291456\n"
    plan = plan_for(tmp_path, SYSCTLS, files={SYSCTL: OURS + body},
                    live={KEEPALIVE: "600\n", RMEM: "4096\t87380\t6291456\n"})
    assert changing(plan) == [] and not plan.has_changes


def test_sysctl_value_with_spaces_is_quoted_for_the_shell(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, SYSCTLS, live={KEEPALIVE: "600\n", RMEM: "4096\t16384\t4194304\n"})
    live = [c for c in changing(plan) if c.resource == "sysctl net.ipv4.tcp_rmem"][0]
    assert commands(live) == ["sysctl -w 'net.ipv4.tcp_rmem=4096 87380 6291456'"]
    assert live.summary == "net.ipv4.tcp_rmem: live 4096 16384 4194304, desired 4096 87380 6291456"


def test_sysctl_the_node_lacks_is_an_error_naming_key_and_node_and_nothing_is_written(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, SYSCTLS, live={KEEPALIVE: "7200\n", RMEM: None})
    errors = changing(plan)
    assert [(c.action, c.summary) for c in errors] == [
        ("error", f"net.ipv4.tcp_rmem: no such sysctl on gpu01 ({RMEM} does not exist)")]
    assert plan.errors and "gpu01" in plan.errors[0]


def test_sysctl_declared_needing_a_reboot_sets_nothing_live(tmp_path: Path) -> None:
    desired = """\
kernel:
  sysctls:
    - {nodes: gpu01, needs: reboot, values: {net.ipv4.tcp_keepalive_time: 600}}
"""
    plan = plan_for(tmp_path, desired, files={SYSCTL: OURS + "net.ipv4.tcp_keepalive_time = 600\n"},
                    live={KEEPALIVE: "7200\n"})
    (live,) = changing(plan)
    assert live.needs == "reboot" and live.ops == [] and "(needs a reboot" in live.summary


def test_our_sysctl_file_is_removed_when_no_entry_selects_the_node_and_another_file_is_left(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, SYSCTLS, files={SYSCTL: OURS + "net.core.somaxconn = 1\n"}, nodes=("cpu01",))
    (gone,) = changing(plan, "cpu01")
    assert gone.action == "delete" and commands(gone) == [f"rm -f -- {SYSCTL}"]
    assert gone.restore is not None and isinstance(gone.restore.ops[0], WriteFile)
    plan = plan_for(tmp_path / "b", SYSCTLS, files={SYSCTL: "net.core.somaxconn = 1\n"}, nodes=("cpu01",))
    assert changing(plan, "cpu01") == []


MODULE = """\
kernel:
  modules:
    - nodes: "gpu[01-02]"
      name: nvidia-standin
      state: {state}
      options: {{NVreg_EnableGpuFirmware: 0}}
"""


def test_module_not_loaded_gets_its_options_file_then_is_loaded(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, MODULE.format(state="loaded"), live={NV: None})
    file, load = changing(plan)
    assert (file.resource, file.action) == (CONF, "create")
    assert isinstance(file.ops[0], WriteFile)
    assert file.ops[0].content.endswith("\noptions nvidia-standin NVreg_EnableGpuFirmware=0\n")
    assert (load.action, load.needs, commands(load)) == ("create", None, ["modprobe nvidia-standin"])
    assert [o.phase for o in (file, load)] == [26, 26]


def test_loaded_module_whose_live_option_differs_needs_a_driver_reload(tmp_path: Path) -> None:
    body = OURS + "options nvidia-standin NVreg_EnableGpuFirmware=0\n"
    plan = plan_for(tmp_path, MODULE.format(state="loaded"), files={CONF: body},
                    live={NV: "", f"{NV}/initstate": "live\n", f"{NV}/parameters/NVreg_EnableGpuFirmware": "18\n"})
    (reload,) = changing(plan)
    assert reload.needs == "driver-reload"
    assert reload.summary == "nvidia-standin NVreg_EnableGpuFirmware: live 18, desired 0 (needs a driver reload)"
    assert commands(reload) == ["modprobe -r nvidia-standin && modprobe nvidia-standin"]


def test_module_left_alone_when_state_is_null_and_its_live_option_matches(tmp_path: Path) -> None:
    body = OURS + "options nvidia-standin NVreg_EnableGpuFirmware=0\n"
    plan = plan_for(tmp_path, MODULE.format(state="null"), files={CONF: body}, live={NV: None})
    assert changing(plan) == []
    plan = plan_for(tmp_path / "b", MODULE.format(state="null"), files={CONF: body},
                    live={NV: "", f"{NV}/initstate": "live\n", f"{NV}/parameters/NVreg_EnableGpuFirmware": "0\n"})
    assert changing(plan) == []


def test_bool_parameter_shown_as_Y_matches_option_1(tmp_path: Path) -> None:
    desired = """\
kernel:
  modules:
    - {nodes: gpu01, name: nvidia-drm-standin, state: loaded, options: {modeset: 1}}
"""
    drm = "/sys/module/nvidia_drm_standin"
    body = OURS + "options nvidia-drm-standin modeset=1\n"
    conf = "/etc/modprobe.d/reconciler-nvidia-drm-standin.conf"
    plan = plan_for(tmp_path, desired, files={conf: body},
                    live={drm: "", f"{drm}/initstate": "live\n", f"{drm}/parameters/modeset": "Y\n"})
    assert changing(plan) == []
    plan = plan_for(tmp_path / "b", desired, files={conf: body},
                    live={drm: "", f"{drm}/initstate": "live\n", f"{drm}/parameters/modeset": "N\n"})
    assert [c.needs for c in changing(plan)] == ["driver-reload"]


def test_blacklisted_module_loaded_now_is_unloaded_with_a_driver_reload(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, MODULE.format(state="blacklisted"),
                    live={NV: "", f"{NV}/initstate": "live\n", f"{NV}/parameters/NVreg_EnableGpuFirmware": "18\n"})
    file, unload = changing(plan)
    assert isinstance(file.ops[0], WriteFile)
    assert "blacklist nvidia-standin\ninstall nvidia-standin /bin/false\n" in file.ops[0].content
    assert unload.needs == "driver-reload" and commands(unload) == ["modprobe -r nvidia-standin"]
    assert "(needs a driver reload)" in unload.summary


def test_builtin_module_cannot_be_blacklisted_or_reloaded(tmp_path: Path) -> None:
    live = {NV: "", f"{NV}/initstate": None, f"{NV}/parameters/NVreg_EnableGpuFirmware": "18\n"}
    plan = plan_for(tmp_path, MODULE.format(state="blacklisted"), live=live)
    assert [c.action for c in changing(plan)] == ["create", "error"]
    assert "built into the kernel" in changing(plan)[1].summary
    plan = plan_for(tmp_path / "b", MODULE.format(state="loaded"), live=live)
    assert [c.action for c in changing(plan)] == ["create", "error"]
    assert "kernel command line" in changing(plan)[1].summary


def test_parameter_the_module_does_not_show_is_unknown_not_a_change(tmp_path: Path) -> None:
    body = OURS + "options nvidia-standin NVreg_EnableGpuFirmware=0\n"
    plan = plan_for(tmp_path, MODULE.format(state="loaded"), files={CONF: body},
                    live={NV: "", f"{NV}/initstate": "live\n"})
    (unknown,) = changing(plan)
    assert unknown.action == "unknown" and "NVreg_EnableGpuFirmware: no live value" in unknown.summary
    assert not [c for c in plan.changing() if c.node == "gpu01"]


def test_our_modprobe_file_of_a_module_no_longer_named_is_removed_a_foreign_one_left(tmp_path: Path) -> None:
    old = "/etc/modprobe.d/reconciler-ib-standin.conf"
    hand = "/etc/modprobe.d/reconciler-hand.conf"
    plan = plan_for(tmp_path, MODULE.format(state="null"), files={CONF: OURS + "options nvidia-standin "
                                                                  "NVreg_EnableGpuFirmware=0\n"},
                    live={NV: None}, listing={old: OURS + "blacklist ib-standin\n", hand: "blacklist x\n"})
    (gone,) = changing(plan)
    assert gone.resource == old and gone.action == "delete" and commands(gone) == [f"rm -f -- {old}"]


def test_live_values_not_gathered_are_unknown(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, MODULE.format(state="loaded") + SYSCTLS.replace("kernel:\n", ""),
                    unanswered=("gpu02",))
    assert [(c.driver, c.action) for c in changing(plan, "gpu02")] == [
        ("kernel_modules", "create"), ("kernel_modules", "unknown"), ("sysctls", "unknown")]
    assert not [c for c in plan.changing() if c.node == "gpu02" and c.ops and c.driver == "sysctls"]


def test_request_asks_files_and_live_paths_in_the_one_fact_script(tmp_path: Path) -> None:
    ctx = Context(loaded=load_dir(write_state(tmp_path / "repo", MODULE.format(state="loaded") + SYSCTLS.replace(
        "kernel:\n", ""))), source="test")
    req = build_request(ctx, "gpu01", DRIVERS)
    assert CONF in req.files and SYSCTL in req.files
    assert f"'{NV}/parameters/NVreg_EnableGpuFirmware'" in req.python[MODULES_KEY]
    assert f"'{KEEPALIVE}'" in req.python[SYSCTLS_KEY]
    scope: dict[str, Any] = {}
    exec(req.python[SYSCTLS_KEY], scope)  # the snippet itself, on this host: the key exists here too
    answer = kernel_live.parse({"rc": 0, "stdout": scope["stdout"]})
    assert answer is not None and answer[KEEPALIVE].strip().isdigit() and answer[RMEM] is not None


def test_hostile_answers_are_dropped() -> None:
    assert kernel_live.parse({"rc": 0, "stdout": "__import__('os').system('x')"}) is None
    assert kernel_live.parse({"rc": 0, "stdout": "[1, 2]"}) is None
    assert kernel_live.parse({"rc": 0, "stdout": "{'/a': 5, '/b': {'error': 'x'}, 3: 'y', '/c': None}"}) == {
        "/b": {"error": "x"}, "/c": None}
