"""ClusterShell gateways on a light testbed (issue 15 item 3): facts through two gateways equal direct facts;
killing one gateway reports its nodes unreachable while the others converge."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.drivers import all_drivers
from reconciler.engine.plan import Plan
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
clustershell = pytest.importorskip("ClusterShell")
GATEWAYS = {"gpu01": "gpu[03-05]", "gpu02": "gpu[06-08]"}
ALL_TRUE = '{type: custom, start: "true", stop: "true", restart: "true", status: "true"}'


def gateway_state(bed: Testbed, into: Path) -> Path:
    """The light testbed's desired state with ssh.gateways (and a service manager that needs no daemon)."""
    shutil.copytree(bed.desired_state, into)
    nodes = into / "nodes.yaml"
    lines = "".join(f'    - {{name: {gw}, nodes: "{behind}"}}\n' for gw, behind in GATEWAYS.items())
    text = nodes.read_text().replace(f"  service_manager: {ALL_TRUE}\n",
                                     f"  service_manager: {ALL_TRUE}\n  gateways:\n{lines}")
    assert "gateways:" in text
    nodes.write_text(text)
    return into


def test_facts_through_two_gateways_equal_direct_facts_and_a_dead_gateway_loses_only_its_nodes(
        testbed_factory: Callable[..., Testbed], tmp_path: Path) -> None:
    if not Path("/usr/lib/python3/dist-packages/ClusterShell").is_dir():
        pytest.skip("the nodes' python3 has no ClusterShell: apt-get install python3-clustershell (testbed deps)")
    from reconciler.desired.loader import load_dir
    from reconciler.engine.run import open_reconcile
    from reconciler.transport.clush import ClushTransport
    from reconciler.transport.ssh import SSHTransport

    bed = testbed_factory(nodes=8, light=True)
    state = gateway_state(bed, tmp_path / "desired")
    loaded = load_dir(state)

    through = open_reconcile(loaded, all_drivers())
    assert isinstance(through.transport, ClushTransport)
    direct = open_reconcile(loaded, all_drivers(), transport=SSHTransport(loaded.state.ssh, Path(loaded.root)))
    try:
        through.gather()
        direct.gather()
    finally:
        through.close()
        direct.close()
    assert set(through.ctx.facts.nodes) == set(bed.nodes)
    assert all(f.reachable for f in through.ctx.facts.nodes.values())
    assert through.ctx.facts.model_dump() == direct.ctx.facts.model_dump()
    # the nodes behind gateways really went through ClusterShell: no direct connection to them
    direct_counts = through.transport.direct.connects  # type: ignore[attr-defined]
    assert set(direct_counts) == {"ctl", "gpu01", "gpu02"}

    # gateway gpu02 dies; the managed file changes; an apply through the gateways converges every node still
    # reachable (only the patches: a light testbed has no Slurm daemons for the Slurm files' follow-ups)
    os.kill(bed.pid1("gpu02"), signal.SIGKILL)
    patches = state / "patches.yaml"
    patches.write_text(patches.read_text().replace("testbed=", "testbed-changed="))
    assert patches_plan(state).unreachable.keys() == {"gpu02", "gpu06", "gpu07", "gpu08"}
    run = open_reconcile(load_dir(state), all_drivers())
    try:
        run.gather()
        plan = run.plan()
        plan.changes = [c for c in plan.changes if c.driver == "patches"]
        plan.followups = []
        assert {c.node for c in plan.changing()} == {"ctl", "gpu01", "gpu03", "gpu04", "gpu05"}
        run.apply(plan)
    finally:
        run.close()
    after = patches_plan(state)
    assert set(after.unreachable) == {"gpu02", "gpu06", "gpu07", "gpu08"}
    assert all("gateway gpu02" in after.unreachable[n] for n in ("gpu06", "gpu07", "gpu08"))
    assert [c for c in after.changing() if c.driver == "patches"] == []
    for node in ("ctl", "gpu03", "gpu05"):
        assert "testbed-changed=" in bed.run(node, "cat /etc/reconciler-testbed/light.conf", check=True).stdout


def patches_plan(state: Path) -> Plan:
    """A fresh plan of STATE through its gateways."""
    from reconciler.desired.loader import load_dir
    from reconciler.engine.run import open_reconcile

    run = open_reconcile(load_dir(state), all_drivers())
    try:
        run.gather()
        return run.plan()
    finally:
        run.close()
