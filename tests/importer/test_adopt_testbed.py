"""Adopting a hand-made cluster whole: the scripts slurm.conf names and the other files Slurm reads.

A running testbed (Slurm files written by the testbed, not by the reconciler) gets, by hand, what a real site
keeps: a site prolog named by `Prolog=` (on every node, one node's copy different), a plugstack.conf with a
plugstack.conf.d/ file, a topology.conf and an enroot image. `reconciler import ssh://ctl` adopts all of it;
the first plan is exit 0; a hand edit of the prolog is drift with a diff and is healed; a topology.conf change in
Git plans `scontrol reconfigure`, a plugstack.conf.d change a slurmd restart on the nodes running slurmd (22.05:
spank.8, plugins loaded in slurmd's context persist until slurmd restarts).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from reconciler.importer import AdoptOptions, import_files
from reconciler.importer.sources import RemoteFiles, parse_ssh_url
from reconciler.model import SSHDefaults
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
PROLOG = "/etc/slurm/site-prolog.sh"
PROLOG_TEXT = "#!/bin/bash\n# site prolog: made by hand\nlogger -t prolog \"job $SLURM_JOB_ID\"\nexit 0\n"
GPU02_PROLOG = PROLOG_TEXT.replace("made by hand", "made by hand, gpu02's own copy")
PLUGSTACK = "# site SPANK plugins\ninclude /etc/slurm/plugstack.conf.d/*.conf\n"
PYXIS = "# required /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so (not on the testbed)\n"
TOPOLOGY = "SwitchName=s0 Nodes=gpu[01-02]\n"
IMAGE = "/srv/images/base.sqsh"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The reconciler command line."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def put(testbed: Testbed, node: str, path: str, text: str, mode: str = "0644") -> None:
    """Write a file on a node by hand (as an admin would, not through the reconciler)."""
    testbed.run(node, f"mkdir -p $(dirname {path}) && cat > {path} <<'EOF'\n{text}EOF\nchmod {mode} {path}",
                check=True)


@pytest.fixture(scope="module")
def adopted(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> tuple[Testbed, Path]:
    """A running testbed with a site's own files added by hand, imported over SSH with its inventory added."""
    testbed = testbed_factory(nodes=2, bare=False)
    testbed.wait_idle()
    for node in ("ctl", "gpu01", "gpu02"):
        put(testbed, node, PROLOG, GPU02_PROLOG if node == "gpu02" else PROLOG_TEXT, "0750")
        put(testbed, node, "/etc/slurm/plugstack.conf", PLUGSTACK)
        put(testbed, node, "/etc/slurm/plugstack.conf.d/pyxis.conf", PYXIS)
        put(testbed, node, "/etc/slurm/topology.conf", TOPOLOGY)
        testbed.run(node, f"echo 'Prolog={PROLOG}' >> /etc/slurm/slurm.conf", check=True)
    testbed.run("ctl", f"mkdir -p /srv/images && head -c 4096 /dev/urandom > {IMAGE}", check=True)
    testbed.run("ctl", "scontrol reconfigure", check=True)
    testbed.wait_idle()
    key = tmp_path_factory.mktemp("key") / "munge.key"
    key.write_bytes(base64.b64decode(testbed.run("ctl", "base64 -w0 /etc/munge/munge.key", check=True).stdout))
    out = tmp_path_factory.mktemp("imported") / "state"
    result = cli("import", "ssh://ctl", "--out", str(out), "--ssh-config", str(testbed.ssh_config),
                 "--known-hosts", str(testbed.known_hosts), "--munge-key-file", str(key),
                 "--image-dir", "/srv/images")
    assert result.returncode == 0, result.stdout + result.stderr
    shutil.copy(testbed.desired_state / "nodes.yaml", out / "nodes.yaml")  # how the testbed's nodes are reached
    return testbed, out


def entries(out: Path, name: str, key: str) -> list[dict]:
    """The entries under KEY of an imported YAML file."""
    return list(YAML(typ="safe").load((out / name).read_text())[key])


def test_every_site_file_is_adopted_with_its_node_set_and_consequence(adopted: tuple[Testbed, Path]) -> None:
    _, out = adopted
    files = {(e["path"], e["nodes"]): e for e in entries(out, "files.yaml", "files")}
    # plugstack: the slurmd nodes' copies restart slurmd (22.05, spank.8), the controller's (srun) needs nothing
    assert set(files) == {(PROLOG, "ctl,gpu01"), (PROLOG, "gpu02"), ("/etc/slurm/plugstack.conf", "gpu[01-02]"),
                          ("/etc/slurm/plugstack.conf", "ctl"), ("/etc/slurm/plugstack.conf.d/pyxis.conf", "ctl"),
                          ("/etc/slurm/plugstack.conf.d/pyxis.conf", "gpu[01-02]"),
                          ("/etc/slurm/topology.conf", "ctl,gpu[01-02]")}, sorted(files)
    prolog = files[(PROLOG, "ctl,gpu01")]
    assert (prolog["mode"], prolog["owner"], prolog["group"], prolog["validate"]) == ("0750", "root", "root",
                                                                                       "bash -n %s")
    assert (out / prolog["source"]).read_text() == PROLOG_TEXT
    assert (out / files[(PROLOG, "gpu02")]["source"]).read_text() == GPU02_PROLOG
    assert "notify" not in prolog  # a prolog is read at each job: a change needs nothing
    assert "notify" not in files[("/etc/slurm/plugstack.conf", "ctl")]  # srun reads it at each job
    assert files[("/etc/slurm/plugstack.conf", "gpu[01-02]")]["notify"] == ["restart slurmd rolling"]
    assert files[("/etc/slurm/topology.conf", "ctl,gpu[01-02]")]["notify"] == ["scontrol reconfigure"]
    services = {e["name"]: e["nodes"] for e in entries(out, "services.yaml", "services")}
    assert services == {"slurmctld": "ctl", "slurmd": "gpu[01-02]", "munge": "ctl,gpu[01-02]"}
    assert entries(out, "images.yaml", "images") == [{"path": IMAGE, "import_on": "ctl"}]
    munge = YAML(typ="safe").load((out / "munge.yaml").read_text())["munge"]
    assert set(munge) == {"key_file"}
    key_bytes = Path(munge["key_file"]).read_bytes()
    assert not any(key_bytes in p.read_bytes() for p in out.rglob("*") if p.is_file())  # never the key itself
    assert "Prolog: " + PROLOG in (out / "cluster.yaml").read_text()


def test_first_plan_after_the_import_is_a_no_op(adopted: tuple[Testbed, Path]) -> None:
    _, out = adopted
    result = cli("plan", str(out), "--format", "json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    plan = json.loads(result.stdout)
    assert [c for c in plan["changes"] if c["action"] != "ok"] == []
    per_node = json.loads(cli("plan", str(out), "--format", "json", "--per-node").stdout)
    compared = {(c["node"], c["resource"]) for c in per_node["changes"] if c["action"] == "ok"}
    assert {("gpu02", PROLOG), ("ctl", "/etc/slurm/topology.conf"), ("gpu01", "/etc/slurm/plugstack.conf"),
            ("ctl", IMAGE)} <= compared, sorted(compared)


def test_a_hand_edit_of_the_prolog_is_drift_with_a_diff_and_is_healed(adopted: tuple[Testbed, Path]) -> None:
    testbed, out = adopted
    testbed.run("gpu01", f"sed -i 's/exit 0/echo tampered; exit 0/' {PROLOG}", check=True)
    drift = cli("plan", str(out), "--format", "json")
    assert drift.returncode == 2, drift.stdout[-3000:] + drift.stderr
    [change] = [c for c in json.loads(drift.stdout)["changes"] if c["action"] != "ok"]
    assert change["resource"] == PROLOG and change["nodes"] == ["gpu01"]
    edits = [line for line in change["diff"].splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert edits == ["-echo tampered; exit 0", "+exit 0"], change["diff"]
    healed = cli("apply", str(out), "--yes")
    assert healed.returncode == 0, healed.stdout[-3000:] + healed.stderr
    assert testbed.run("gpu01", f"cat {PROLOG}", check=True).stdout == PROLOG_TEXT
    assert testbed.run("gpu01", f"stat -c %a {PROLOG}", check=True).stdout.strip() == "750"
    assert cli("plan", str(out)).returncode == 0


def test_changes_in_git_plan_their_consequences(adopted: tuple[Testbed, Path], tmp_path: Path) -> None:
    _, out = adopted
    changed = tmp_path / "state"
    shutil.copytree(out, changed)
    (changed / "files/etc/slurm/topology.conf").write_text(TOPOLOGY + "SwitchName=s1 Switches=s0\n")
    result = cli("plan", str(changed), "--format", "json")
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr
    plan = json.loads(result.stdout)
    [change] = [c for c in plan["changes"] if c["action"] != "ok"]
    assert change["resource"] == "/etc/slurm/topology.conf" and change["nodes"] == ["ctl", "gpu01", "gpu02"]
    assert "+SwitchName=s1 Switches=s0" in change["diff"].splitlines()
    assert [(f["kind"], f["target"]) for f in plan["followups"]] == [("command", "scontrol reconfigure")]

    (changed / "files/etc/slurm/topology.conf").write_text(TOPOLOGY)
    pyxis = [p for p in (changed / "files/etc/slurm/plugstack.conf.d").iterdir() if "@" not in p.name]
    pyxis[0].write_text(PYXIS + "# changed in Git\n")
    plan = json.loads(cli("plan", str(changed), "--format", "json").stdout)
    assert [c["resource"] for c in plan["changes"] if c["action"] != "ok"] == [
        "/etc/slurm/plugstack.conf.d/pyxis.conf"]
    assert [(f["node"], f["kind"], f["target"]) for f in plan["followups"]] == [
        ("gpu01", "restart", "slurmd"), ("gpu02", "restart", "slurmd")], plan["followups"]  # spank.8 22.05


def test_the_import_reads_each_node_once_after_the_controller(adopted: tuple[Testbed, Path], tmp_path: Path) -> None:
    """The controller's Slurm files first (one round trip), then one round trip to every node, in parallel."""
    testbed, _ = adopted
    ssh = SSHDefaults(config=str(testbed.ssh_config), known_hosts=str(testbed.known_hosts), user="root")
    files = RemoteFiles(parse_ssh_url("ssh://ctl"), "/etc/slurm", ssh, tmp_path)  # type: ignore[arg-type]
    try:
        seen: list[tuple[int, int]] = []
        result = import_files(files, tmp_path / "state", None, "ssh://ctl",
                              AdoptOptions(progress=lambda done, total: seen.append((done, total))))
        assert files.transport.round_trips == {"ctl": 2, "gpu01": 1, "gpu02": 1}
    finally:
        files.close()
    assert sorted(seen) == [(1, 3), (2, 3), (3, 3)]
    assert any(source.startswith("files/etc/slurm/site-prolog.sh") for source in result.sources)
