"""Light testbeds (issue 15 item 4): sshd-only nodes, the wide address plan, `reconciler plan` reaching all.

The default run brings up 80 light nodes (a few seconds), plans all of them over SSH, applies and plans again
(nothing left). 256 and 1,000 light nodes (a /20, names gpu001..) are brought up by the bench
(`python -m bench --sections noop,drift --nodes 256,1000`), not here: the suite skips nothing. The address-plan
tests need no root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.testbed_fixture import Testbed, compute_names

REPO = Path(__file__).resolve().parents[2]
TESTBED_DIR = REPO / "deploy" / "testbed"
sys.path.insert(0, str(TESTBED_DIR))

import desired_state  # noqa: E402  (deploy/testbed, path set above)
import tb_base  # noqa: E402
import tb_layout  # noqa: E402
import tb_services  # noqa: E402

from drivers import slurmctld_steps  # noqa: E402

# ------------------------------------------------------------------------------------- address plan (no root)


def test_small_testbeds_keep_their_names_and_addresses() -> None:
    layout = tb_layout.Layout(name="x", computes=4, subnet="10.250.0")
    assert layout.compute_nodes == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert [layout.ip(n) for n in layout.nodes] == ["10.250.0.1", *(f"10.250.0.{10 + i}" for i in range(1, 5))]
    assert (layout.bridge_ip, layout.prefixlen, layout.cidr) == ("10.250.0.254", 24, "10.250.0.0/24")
    assert tb_layout.Layout(name="x", computes=200, subnet="10.250.0").ip("gpu200") == "10.250.0.210"


def test_wide_testbeds_take_a_slash_20_and_longer_names() -> None:
    layout = tb_layout.Layout(name="x", computes=1000, subnet="10.250.16", light=True)
    tb_layout.validate_layout(layout)
    assert layout.compute_nodes[:2] == ["gpu0001", "gpu0002"] and layout.compute_nodes[-1] == "gpu1000"
    assert layout.prefixlen == 20 and layout.cidr == "10.250.16.0/20"
    assert [layout.ip(n) for n in ("ctl", "gpu0001", "gpu0245", "gpu0246", "gpu1000")] == [
        "10.250.16.1", "10.250.16.11", "10.250.16.255", "10.250.17.0", "10.250.19.242"]
    assert layout.bridge_ip == "10.250.31.254"
    addresses = {layout.ip(n) for n in layout.nodes} | {layout.bridge_ip}
    assert len(addresses) == len(layout.nodes) + 1
    bed = Testbed(name="x", subnet="10.250.16", computes=compute_names(1000), bare=False, state_dir=Path("/x"))
    assert bed.computes == layout.compute_nodes and all(bed.ip(n) == layout.ip(n) for n in layout.nodes)
    assert compute_names(256)[0] == "gpu001" and compute_names(99)[-1] == "gpu99"


@pytest.mark.parametrize(("computes", "subnet", "light", "message"), [
    (300, "10.250.16", False, "between 1 and 200 (up to 4000 with --light)"),
    (300, "10.250.8", True, "third octet must be a multiple of 16 (e.g. 10.250.0)"),
    (4001, "10.250.16", True, "between 1 and 4000"),
])
def test_bad_sizes_and_subnets_are_refused(computes: int, subnet: str, light: bool, message: str) -> None:
    with pytest.raises(tb_base.TestbedError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tb_layout.validate_layout(tb_layout.Layout(name="x", computes=computes, subnet=subnet, light=light))


def test_light_desired_state_validates(tmp_path: Path) -> None:
    loader = pytest.importorskip("reconciler.desired.loader")
    layout = tb_layout.Layout(name="tblight", computes=256, subnet="10.250.16", light=True)
    out = tmp_path / "desired-state"
    data = desired_state.spec(layout, cpus=16, memory_mb=64000, gpus=8)
    for name, text in desired_state.render(data).items():
        out.mkdir(exist_ok=True)
        (out / name).write_text(text)
    assert sorted(p.name for p in out.iterdir()) == ["cluster.yaml", "nodes.yaml", "patches.yaml", "rollout.yaml"]
    state = loader.load_dir(out).state
    assert [p.path for p in state.patches] == [desired_state.LIGHT_FILE]
    assert state.patches[0].nodes == "ctl,gpu[001-256]"
    assert state.cluster.node_sets[0].nodes == "gpu[001-256]"


def test_light_scontrol_standin_answers_as_a_ready_slurmctld(tmp_path: Path) -> None:
    """The product's readiness check (drivers/slurmctld_steps.py, unchanged for real clusters) against the light
    stand-in: UP on ping; from 23.11 ready only once a reconfigure came after the newest file, as slurmctld."""
    bindir, confdir, boot = tmp_path / "bin", tmp_path / "etc" / "slurm", tmp_path / "boot"
    bindir.mkdir()
    confdir.mkdir(parents=True)
    scontrol = bindir / "scontrol"
    scontrol.write_text(tb_services.LIGHT_SLURM_STANDIN.format(command="scontrol", boot=str(boot).lstrip("/")))
    scontrol.chmod(0o755)
    conf = confdir / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    boot.write_text("")
    now = time.time()
    os.utime(boot, (now - 100, now - 100))  # the stand-in "started" before the files were written
    os.utime(conf, (now - 50, now - 50))
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}

    def ready(since_files: bool) -> subprocess.CompletedProcess[str]:
        script = slurmctld_steps.controller_ready(str(conf), since_files=since_files)
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=30)

    assert ready(since_files=False).returncode == 0
    stale = ready(since_files=True)
    assert stale.returncode == 1 and "slurmctld not ready: Slurmctld(primary) at ctl is UP" in stale.stderr
    subprocess.run([str(scontrol), "reconfigure"], check=True, timeout=30)
    assert ready(since_files=True).returncode == 0


# ------------------------------------------------------------------------------------------- on the testbed


def plan_reaches_every_node(bed: Testbed) -> float:
    """Run `reconciler plan` on BED's desired state; assert every node was reached; return its seconds."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "reconciler.cli", "plan", "--format", "json", "--per-node",
                           str(bed.desired_state)], capture_output=True, text=True, timeout=900, cwd=REPO)
    seconds = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["unreachable"] == {} and data["errors"] == []
    planned = {c["node"] for c in data["changes"] if c["resource"] == desired_state.LIGHT_FILE}
    assert planned == set(bed.nodes)
    return seconds


def check_light_nodes(bed: Testbed, sample: list[str]) -> None:
    """A light node runs the sh loop as PID 1 and sshd, nothing else; python3 is there for the facts."""
    for node in sample:
        ps = bed.run(node, "ps -eo pid=,comm=", check=True).stdout.split()
        assert ps[:2] == ["1", "sh"] and "sshd" in ps
        assert not {"supervisord", "munged", "slurmd", "slurmctld"} & set(ps[1::2])
        assert bed.ssh(node, "hostname; python3 -c 'print(1)'", check=True).stdout.split() == [node, "1"]


def reconciler(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """`reconciler ARGS` from this checkout, output captured."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.mark.testbed
def test_light_testbed_of_80_nodes_converges(testbed_factory: Callable[..., Testbed]) -> None:
    """Past 64 nodes the benchmarks use the light profile: plan, apply (its `scontrol reconfigure` waits for the
    stand-in controller to answer as a ready slurmctld does), plan again: nothing left (issue 43 item 9)."""
    bed = testbed_factory(nodes=80, light=True)
    assert bed.computes[-1] == "gpu80" and bed.ip("gpu80") == f"{bed.subnet}.90"
    check_light_nodes(bed, ["ctl", "gpu01", "gpu80"])
    plan_reaches_every_node(bed)
    applied = reconciler("apply", "--yes", str(bed.desired_state))
    assert applied.returncode == 0, (applied.stdout + applied.stderr)[-3000:]
    assert "scontrol reconfigure" in applied.stdout and "FAILED" not in applied.stdout + applied.stderr
    again = reconciler("plan", "--format", "json", str(bed.desired_state))
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    data = json.loads(again.stdout)
    assert (data["changes"], data["unreachable"], data["errors"]) == ([], {}, [])
    assert bed.ssh("gpu80", f"cat {desired_state.LIGHT_FILE}", check=True).stdout.strip().endswith(f"testbed={bed.name}")
