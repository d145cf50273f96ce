"""Configless Slurm (issue 14, item 5): files on the controllers only, slurmd told --conf-server, stale files removed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconciler.desired.loader import load_dir
from reconciler.drivers import all_drivers
from reconciler.engine.context import Context
from reconciler.engine.ops import RunCommand, WriteFile
from reconciler.engine.planner import make_plan
from reconciler.render import managed_files_for, render_file
from reconciler.render.configless import (
    SUPERVISORD_PROGRAM,
    SYSTEMD_DROPIN,
    conf_server,
    ctld_parameters,
    systemd_dropin,
)
from tests.drivers.operations.test_operations import EXAMPLE, _file, converged_facts

DGX = ("dgx01", "dgx02", "dgx03", "dgx04")


@pytest.fixture
def ctx() -> Context:
    """The example cluster switched to configless, with facts of a cluster that is already configless."""
    return _configless(EXAMPLE)


def _configless(directory: Path) -> Context:
    loaded = load_dir(directory)
    loaded.state.cluster.mode = "configless"
    context = Context(loaded=loaded, source="desired-state @ test")
    context.facts = converged_facts(context)
    for node in DGX:
        context.facts.nodes[node].files[SYSTEMD_DROPIN] = _file(systemd_dropin(loaded.state.cluster, context.source))
    return context


def test_slurm_files_only_on_controller_and_nodes_without_slurmd(ctx: Context) -> None:
    state = ctx.state
    assert managed_files_for(state, "login01") == ["slurm.conf", "gres.conf", "cgroup.conf", "fstab"]
    for node in DGX:
        assert [f for f in managed_files_for(state, node) if f.endswith(".conf")] == []


def test_enable_configless_merged_into_admin_value() -> None:
    assert ctld_parameters(None) == "enable_configless"
    assert ctld_parameters("idle_on_node_suspend,cloud_dns") == "idle_on_node_suspend,cloud_dns,enable_configless"
    assert ctld_parameters("enable_configless,cloud_dns") == "enable_configless,cloud_dns"
    state = load_dir(EXAMPLE).state
    state.cluster.mode = "configless"
    assert "\nSlurmctldParameters=enable_configless\n" in render_file(state, "login01", "slurm.conf", "t")
    state.cluster.slurm_conf.SlurmctldParameters = "cloud_dns"  # type: ignore[attr-defined]
    conf = render_file(state, "login01", "slurm.conf", "t")
    assert "\nSlurmctldParameters=cloud_dns,enable_configless\n" in conf
    assert conf.count("SlurmctldParameters=") == 1


def test_conf_server_names_every_controller_with_the_port() -> None:
    cluster = load_dir(EXAMPLE).state.cluster
    assert conf_server(cluster) == "login01:6817"
    cluster.controllers = ["ctl1(10.0.0.1)", "ctl2"]
    assert conf_server(cluster) == "10.0.0.1:6817,ctl2:6817"


def test_converged_configless_cluster_plans_nothing(ctx: Context) -> None:
    assert make_plan(ctx, all_drivers()).changing() == []


def test_systemd_dropin_created_then_daemon_reload_and_rolling_restart(ctx: Context) -> None:
    del ctx.facts.nodes["dgx02"].files[SYSTEMD_DROPIN]
    plan = make_plan(ctx, all_drivers())
    [change] = plan.changing()
    assert (change.node, change.resource, change.action) == ("dgx02", SYSTEMD_DROPIN, "create")
    write = change.ops[0]
    assert isinstance(write, WriteFile)
    assert 'Environment="SLURMD_OPTIONS=--conf-server login01:6817"\n' in write.content
    assert "[Unit]\n# slurm.conf comes from slurmctld (--conf-server), not from a local file\nConditionPathExists=\n" \
        in write.content
    steps = [(f.node, f.kind, f.target, f.rolling, f.drain is not None) for f in plan.followups]
    assert steps == [("dgx02", "command", "systemctl daemon-reload", False, False),
                     ("dgx02", "restart", "slurmd", True, True)]


def test_stale_slurm_conf_on_compute_node_is_removed(ctx: Context) -> None:
    text = render_file(ctx.state, "login01", "slurm.conf", "old commit")
    ctx.facts.nodes["dgx03"].files["/etc/slurm/slurm.conf"] = _file(text)
    plan = make_plan(ctx, all_drivers())
    [change] = plan.changing()
    assert (change.node, change.resource, change.action) == ("dgx03", "/etc/slurm/slurm.conf", "delete")
    assert "slurmd uses a local slurm.conf when one exists" in change.summary
    assert change.ops == [RunCommand(command="mv -f /etc/slurm/slurm.conf /etc/slurm/slurm.conf.reconciler-bak",
                                     description="remove /etc/slurm/slurm.conf (configless)")]
    assert [(f.node, f.kind, f.target, f.rolling) for f in plan.followups] == [("dgx03", "restart", "slurmd", True)]


def test_supervisord_nodes_get_a_program_and_an_update(tmp_path: Path) -> None:
    directory = tmp_path / "desired-state"
    shutil.copytree(EXAMPLE, directory)
    nodes = directory / "nodes.yaml"
    nodes.write_text(nodes.read_text().replace("    roles: [compute]\n",
                                               "    roles: [compute]\n    service_manager: {type: supervisord}\n"))
    ctx = _configless(directory)
    ctx.facts.nodes["dgx01"].services["slurmd"].running = False  # no slurmd program yet: would be a start
    plan = make_plan(ctx, all_drivers())
    created = sorted((c.node, c.resource) for c in plan.changing())
    assert created == [(n, SUPERVISORD_PROGRAM) for n in DGX]
    write = plan.changing()[0].ops[0]
    assert isinstance(write, WriteFile)
    assert "[program:slurmd]\ncommand=/usr/sbin/slurmd -D --conf-server login01:6817\n" in write.content
    steps = [(f.node, f.kind, f.target, f.rolling) for f in plan.followups]
    assert steps == [(n, "command", "supervisorctl reread && supervisorctl update slurmd", True) for n in DGX]


def test_ctl_node_definition_change_restarts_configless_slurmds(ctx: Context) -> None:
    ctx.state.cluster.node_sets[0].real_memory = 1000000
    plan = make_plan(ctx, all_drivers())
    assert [(c.node, c.resource) for c in plan.changing()] == [("login01", "/etc/slurm/slurm.conf")]
    assert {f.node for f in plan.followups if f.target == "slurmd"} >= {"dgx01"}
