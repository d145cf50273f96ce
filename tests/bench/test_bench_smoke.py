"""The benchmarks run: the scale state, `python -m bench` on its quick sections, the Ansible playbook.

Figures live in bench/README.md, not here. The testbed sections (noop, change) are not run here: they
need root and minutes; what they rely on is checked without SSH: the generated inventory, the playbook's
syntax, and, with Ansible's local connection, that its templates and blocks come out byte-identical to
what the reconciler writes (the bench itself asserts changed=0 against the testbed).
"""

from __future__ import annotations

import getpass
import grp
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main as bench_main
from bench.ansible_project import PLAYBOOK, AnsibleProject, ansible_playbook, inventory, recap, slurm_conf_vars
from bench.nccl import recorded
from bench.render_scale import main, render_all, write_desired_state
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.desired.source import describe_source
from reconciler.render import render_file
from reconciler.render.blocks import block_body, replace_block

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "desired-state"


def test_generated_state_validates_and_renders(tmp_path: Path) -> None:
    """A 100-node state from the benchmark loads without errors and renders every node's files."""
    write_desired_state(tmp_path, 100)
    state = load_dir(tmp_path).state
    assert len(node_specs(state)) == 102
    assert render_all(state, "bench") > 0
    fstab = render_file(state, "gpu00050", "fstab", "bench")
    assert "/lustre" in fstab and "/home" in fstab
    assert "/lustre" not in render_file(state, "gpu00051", "fstab", "bench")
    assert "NodeName=gpu[00001-00025] " in render_file(state, "login01", "slurm.conf", "bench")


def test_bench_main_prints_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.render_scale` prints one row per size."""
    assert main(["--sizes", "40,80", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[0] == "nodes"
    assert [line.split()[0] for line in out.splitlines()[1:3]] == ["42", "82"]


def test_python_m_bench_quick_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench --sections scale,nccl` at small N: tables, JSON, markdown and PNG."""
    assert bench_main(["--sections", "scale,nccl", "--sizes", "60,120", "--runs", "1",
                       "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Render and diff at scale" in out and "NCCL check cost" in out
    results = json.loads((tmp_path / "bench.json").read_text())
    assert [row["nodes"] for row in results["scale"]] == [62, 122]
    assert all(row["changes"] == 8 and row["changed_nodes"] == row["nodes"] - 1 for row in results["scale"])
    assert all(0 < row["fold_s"] < row["change_plan_s"] and row["render_folded_s"] > 0 for row in results["scale"])
    assert "fold by node set (share of that plan)" in out
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert "### NCCL check cost" in (tmp_path / "bench.md").read_text()


def test_recorded_nccl_runs_reach_the_same_verdict() -> None:
    """The device fixtures parse; every setting that reaches 1 GiB passes; the full sweep has the 31 sizes."""
    rows = recorded()
    full = [row for row in rows if row["config"] == "full"]
    assert len(full) >= 1 and all(row["sizes"] == 31 and row["share"] == 1.0 for row in full)
    assert all(row["verdicts"] == ["pass"] for row in rows if not row["config"].startswith("floor"))
    assert all(row["gpu_s"] == pytest.approx(row["gpus"] * row["wall_s"]) for row in rows)


def test_slurm_conf_vars_keep_order_and_quotes() -> None:
    """The template variables keep slurm.conf's order; quoted values stay quoted."""
    found = slurm_conf_vars('ClusterName=c\nSlurmctldHost=a\nSlurmctldHost=b\n\n# Nodes\n'
                            'NodeName=n[1-2] CPUs=4 Features="a b" State=UNKNOWN\n\n# Partitions\n'
                            'PartitionName=p Nodes=n[1-2] MaxTime=1:00:00 State=UP\n')
    assert found["slurm_conf_params"] == [["ClusterName", "c"], ["SlurmctldHost", "a"], ["SlurmctldHost", "b"]]
    assert list(found["slurm_node_sets"][0].items()) == [
        ("NodeName", "n[1-2]"), ("CPUs", "4"), ("Features", '"a b"'), ("State", "UNKNOWN")]
    assert found["slurm_partitions"][0]["MaxTime"] == "1:00:00"


def test_ansible_round_trips_counted_per_host(tmp_path: Path) -> None:
    """ssh and sftp invocations count per host; ControlMaster housekeeping (-O) does not."""
    project = AnsibleProject(root=tmp_path, ssh_config=tmp_path / "cfg", hosts=["ctl", "gpu01"], forks=2)
    project.ssh_log.write_text(
        "ssh -C -o ControlMaster=auto -o ControlPath=/x/%C ctl /bin/sh -c 'echo gpu01'\n"
        "sftp -b - -C -o ControlMaster=auto [gpu01]\n"
        "ssh -C -o ControlPath=/x/%C -O exit gpu01\n"
        "ssh -C -o ControlMaster=auto gpu01 /bin/sh -c 'python3 x'\n")
    assert project.count_round_trips() == {"ctl": 1, "gpu01": 2}


@pytest.fixture(scope="module")
def playbook() -> str:
    """The ansible-playbook command (ansible-core comes with the dev and bench extras)."""
    binary = ansible_playbook()
    if binary is None:
        pytest.fail("ansible-playbook not found: pip install -e '.[dev]' brings ansible-core")
    return binary


def _ansible(binary: str, inventory_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = inventory_file.parent / "ansible.cfg"
    cfg.write_text(f"[defaults]\ninventory = {inventory_file}\nretry_files_enabled = False\n"
                   f"local_tmp = {inventory_file.parent / 'tmp'}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1", ANSIBLE_NOCOWS="1",
               ANSIBLE_HOME=str(inventory_file.parent / "home"))
    return subprocess.run([binary, str(PLAYBOOK), *args], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def test_playbook_syntax(playbook: str, tmp_path: Path) -> None:
    """ansible-playbook --syntax-check accepts the playbook with a generated inventory."""
    inventory_file = tmp_path / "inventory.yml"
    inventory_file.write_text(json.dumps(inventory(EXAMPLE)))
    done = _ansible(playbook, inventory_file, "--syntax-check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_playbook_writes_what_the_reconciler_writes(playbook: str, tmp_path: Path) -> None:
    """Run locally (files under tmp_path), the playbook writes our rendered bytes; a second --check changes nothing."""
    data: dict[str, Any] = inventory(EXAMPLE)
    group = data["all"]["children"]["slurm"]
    hosts = {name: (group["hosts"][name] or {}) for name in ("login01", "nfs01", "dgx01")}
    group["hosts"] = hosts
    group["vars"].update(file_owner=getpass.getuser(), file_group=grp.getgrgid(os.getgid()).gr_name,
                         slurm_reconfigure_command="true", exportfs_command="true",
                         ansible_connection="local", ansible_python_interpreter=sys.executable)
    user_fstab = "UUID=abc / ext4 defaults 0 1\n"
    for name, host in hosts.items():
        root = tmp_path / name
        (root / "etc" / "slurm").mkdir(parents=True)
        (root / "etc" / "fstab").write_text(user_fstab)
        host.update(slurm_config_dir=str(root / "etc" / "slurm"), exports_path=str(root / "etc" / "exports"),
                    fstab_path=str(root / "etc" / "fstab"))
        for image in host.get("enroot_images", []):
            image["path"] = str(root / "image.sqsh")
            (root / "image.sqsh").write_bytes(b"hsqs")
    inventory_file = tmp_path / "inventory.yml"
    inventory_file.write_text(json.dumps(data))

    done = _ansible(playbook, inventory_file)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    loaded = load_dir(EXAMPLE)
    state, source = loaded.state, describe_source(loaded.root, loaded.commit)
    for name in ("login01", "dgx01"):
        for conf in ("slurm.conf", "gres.conf", "cgroup.conf"):
            assert (tmp_path / name / "etc" / "slurm" / conf).read_text() == render_file(state, name, conf, source)
        body = block_body(render_file(state, name, "fstab", source))
        assert (tmp_path / name / "etc" / "fstab").read_text() == replace_block(user_fstab, body)
    exports = block_body(render_file(state, "nfs01", "exports", source))
    assert (tmp_path / "nfs01" / "etc" / "exports").read_text() == replace_block("", exports)
    assert "RUNNING HANDLER [scontrol reconfigure]" in done.stdout

    again = _ansible(playbook, inventory_file, "--check", "--diff")
    assert again.returncode == 0, again.stdout[-3000:]
    assert {host: stats["changed"] for host, stats in recap(again.stdout).items()} == dict.fromkeys(hosts, 0)


def test_python_m_bench_daemon_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench --sections daemon --nodes 1 --runs 2`: a latency row per mode, from a real daemon."""
    from bench.testbed import unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    assert bench_main(["--sections", "daemon", "--nodes", "1", "--runs", "2", "--no-plot",
                       "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["daemon"]
    assert [(r["mode"].split()[0], r["computes"]) for r in rows] == [("poll", 1), ("watch", 1)]
    assert all(0 < v < 30 for r in rows for v in r["latency_runs_s"])
    assert "Commit-to-applied latency of the daemon" in capsys.readouterr().out


@pytest.mark.parametrize("peers", ["none", "floor"])
def test_python_m_bench_noop_and_drift_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str], peers: str) -> None:
    """`python -m bench --sections noop,drift --nodes 2 --runs 1 --peers none|floor` on a real testbed: the cold
    plan, the daemon's drift check over persistent sessions (in-sync, no new connection), and the floors; with the
    floors, `--compare` (this checkout again, as the other tree) adds the other checkout's plan and its daemon drift
    check, and both plans their ratio to the paramiko floor of the same run."""
    from bench.common import REPO
    from bench.testbed import unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    compare = ["--compare", str(REPO)] if peers == "floor" else []
    assert bench_main(["--sections", "noop,drift", "--nodes", "2", "--runs", "1", "--peers", peers, "--no-plot",
                       "--out", str(tmp_path), *compare]) == 0
    results = json.loads((tmp_path / "bench.json").read_text())
    tools = {section: [row["tool"] for row in results[section]] for section in ("noop", "drift")}
    floors = ["floor-ssh", "floor-paramiko"] if peers == "floor" else []
    other = ["other-1"] if compare else []
    assert tools == {"noop": ["ours", *other, *floors], "drift": ["ours", "plan", *floors, *other]}
    noop = {row["tool"]: row for row in results["noop"]}
    for tool in ("ours", *other):
        assert ("vs_floor" in noop[tool]) == bool(floors)
    if compare:
        floor_s = noop["floor-paramiko"]["wall_s"]
        assert noop["other-1"]["vs_floor"] == pytest.approx(noop["other-1"]["wall_s"] / floor_s, rel=1e-6)
        assert noop["other-1"]["label"].endswith("(--compare)") and noop["other-1"]["trips_per_node"] == 1
        drift = {row["tool"]: row for row in results["drift"]}  # the other checkout's own daemon drift check
        assert drift["other-1"]["label"].endswith("(--compare)") and drift["other-1"]["wall_s"] > 0
    for row in results["noop"] + results["drift"]:
        assert row["computes"] == 2 and row["nodes"] == 3 and row["runs"] == 1
        assert 0 < row["wall_s"] < 30 and row["cpu_s"] >= 0, row
    drift = {row["tool"]: row for row in results["drift"]}
    assert 0 < drift["ours"]["gather_s"] < drift["ours"]["wall_s"]
    assert drift["ours"]["wall_s"] < drift["plan"]["wall_s"]  # open sessions beat a cold start even at 3 nodes
    assert results["load"]["2"]["before"] and results["load"]["2"]["after"]
    out = capsys.readouterr().out
    assert "Steady-state drift check of the daemon" in out and "No-op reconcile against peers" in out


def test_subnet_option_hands_out_slash_20_blocks_in_turn() -> None:
    """--subnet A.B.C: each testbed of the run takes the next /20 block (bare or light); bad input refused."""
    from bench import testbed

    try:
        testbed.use_subnets("10.253.224")
        assert [testbed._subnet(i, light=i == 1) for i in range(2)] == ["10.253.224", "10.253.240"]
        assert testbed._subnet(2, light=False).startswith("10.252.")  # blocks used up: the default again
        for bad in ("10.253.8", "10.253", "10.253.300", "a.b.c"):
            with pytest.raises(SystemExit, match="multiple of 16"):
                testbed.use_subnets(bad)
    finally:
        testbed.use_subnets("10.253.240")
        testbed._chosen.clear()


def test_a_failed_gateway_run_costs_only_its_own_row() -> None:
    """At 1,000 light nodes the run through gateways can lose nodes to banner timeouts: that tool is recorded as
    failed and left out of the later runs, and the direct plan's figures are kept (they were all lost before)."""
    from bench.peers import Sample, Series, _runs

    series = Series("noop", 1000, 1001, ["ours", "gateways"], light=True, optional={"gateways"})

    def gateways() -> Sample:
        raise RuntimeError("reconciler plan through gateways found changes or failed (exit 1):\n...\n"
                           "no changes; 37 node(s) unreachable")

    calls: list[str] = []

    def ours() -> Sample:
        calls.append("ours")
        return Sample(40.0, 15.0)

    measure = {"ours": ours, "gateways": gateways}
    _runs(series, 3, measure)
    assert calls == ["ours"] * 3
    assert [row["tool"] for row in series.rows()] == ["ours"] and series.rows()[0]["runs"] == 3
    assert series.failed == {"gateways": "reconciler plan through gateways found changes or failed (exit 1): ... "
                                         "no changes; 37 node(s) unreachable"}
    series = Series("noop", 16, 17, ["ours"])
    with pytest.raises(RuntimeError):  # ours is never optional
        _runs(series, 1, {"ours": gateways})


def test_peer_selection() -> None:
    """--peers: none, all, or a subset, in a fixed order; unknown names refused."""
    from bench.peers import PEERS, parse_peers

    assert parse_peers("none") == [] and parse_peers("all") == list(PEERS)
    assert parse_peers("floor,ansible") == ["ansible", "floor"]
    with pytest.raises(SystemExit, match="unknown peer"):
        parse_peers("chef")


def test_pyinfra_project_puts_our_rendered_files(tmp_path: Path) -> None:
    """The pyinfra deploy's data: our rendered Slurm files and the prolog to put, the fstab/exports blocks."""
    from bench.pyinfra_project import PyinfraProject, detected_changes

    project = PyinfraProject(tmp_path, tmp_path / "ssh_config", tmp_path / "known_hosts", ["login01", "dgx01"], 2)
    project.write(EXAMPLE)
    data = json.loads((tmp_path / "data.json").read_text())
    loaded = load_dir(EXAMPLE)
    source = describe_source(loaded.root, loaded.commit)
    put = {item["dest"]: item for item in data["dgx01"]["put"]}
    assert (tmp_path / put["/etc/slurm/slurm.conf"]["src"]).read_text() == render_file(loaded.state, "dgx01",
                                                                                        "slurm.conf", source)
    blocks = {item["path"]: item["lines"] for item in data["dgx01"]["block"]}
    assert blocks["/etc/fstab"] == block_body(render_file(loaded.state, "dgx01", "fstab", source))
    assert "inventory.py" in {p.name for p in tmp_path.iterdir()} and (tmp_path / "deploy.py").exists()
    table = "--> Detected changes:\n    Operation   Change   Conditional Change\n"
    assert detected_changes(table + "    /etc/fstab   -   -\n\n") == []
    assert detected_changes(table + "    /etc/fstab   1 (gpu02)   -\n\n") == ["/etc/fstab   1 (gpu02)   -"]
