"""The round-trip oracle (tests/slurm_meaning.py) on small texts and on every public fixture."""

from pathlib import Path

import pytest

from tests.shared_fixtures import shared_fixture
from tests.slurm_meaning import (
    SlurmConfError,
    assert_same_meaning,
    cgroup_conf_meaning,
    gres_conf_meaning,
    meaning_diff,
    slurm_conf_meaning,
)


@pytest.fixture
def thirdparty() -> Path:
    """../shared/fixtures/slurm-thirdparty (the test is skipped when it is absent)."""
    return shared_fixture("slurm-thirdparty")


# fixture -> (node count, {partition: node count}, SlurmctldHost count), as each SOURCE.md says
EXPECTED = {
    "deepops": (16, {"batch": 16}, 2),
    "slurm_gcp_a3mega": (20, {"x-login": 0, "a3mega": 16, "debug": 4}, 1),
    "openhpc": (32, {"normal": 32}, 1),
    "schedmd_manpage_example": (26, {"debug": 17, "batch": 9, "long": 9}, 2),
    "schedmd_gpu_example": (16, {"all": 16, "dyn1": 8, "dyn2": 8, "dyn3": 16}, 2),
}


def test_default_lines_accumulate_and_apply_only_forward() -> None:
    m = slurm_conf_meaning({"slurm.conf": (
        "NodeName=early CPUs=1\n"
        "NodeName=DEFAULT CPUs=4 RealMemory=1000\n"
        "NodeName=DEFAULT State=UNKNOWN\n"
        "NodeName=n[1-2] RealMemory=2000\n"
        "PartitionName=DEFAULT MaxTime=30 State=UP\n"
        "PartitionName=p Nodes=n[1-2] MaxTime=60\n")})
    assert m.nodes["early"] == {"cpus": "1"}
    assert m.nodes["n2"] == {"cpus": "4", "realmemory": "2000", "state": "UNKNOWN"}
    assert m.partitions["p"] == {"maxtime": "60", "state": "UP", "nodes": ("n1", "n2")}


def test_aliases_follow_slurm_precedence() -> None:
    m = slurm_conf_meaning({"slurm.conf": (
        "NodeName=DEFAULT CPUs=8\n"
        "NodeName=a Procs=4 Features=x,b\n"
        "NodeName=b Procs=4\n"
        "PartitionName=DEFAULT OverSubscribe=NO\n"
        "PartitionName=p Nodes=a Shared=YES\n")})
    assert m.nodes["a"]["cpus"] == "8"  # CPUs (even from DEFAULT) beats Procs
    assert m.nodes["a"]["feature"] == "b,x"
    assert m.partitions["p"]["oversubscribe"] == "NO"


def test_nodeset_by_feature_by_nodes_and_all() -> None:
    m = slurm_conf_meaning({"slurm.conf": (
        "NodeName=g[1-3] Feature=gpu,a100\n"
        "NodeName=c[1-2] Feature=cpu\n"
        "NodeSet=gpus Feature=a100\n"
        "NodeSet=mix Nodes=c1 Feature=gpu\n"
        "PartitionName=gpu Nodes=gpus\n"
        "PartitionName=mix Nodes=mix,c2\n"
        "PartitionName=all Nodes=ALL\n")})
    assert m.nodesets["gpus"] == ("g1", "g2", "g3")
    assert m.partitions["mix"]["nodes"] == ("c1", "c2", "g1", "g2", "g3")
    assert m.partitions["all"]["nodes"] == ("c1", "c2", "g1", "g2", "g3")


def test_include_relative_any_case_and_percent_c(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "slurm.conf").write_text("ClusterName=Alpha\ninclude sub/nodes.conf\nINCLUDE %c.conf\n")
    (tmp_path / "sub" / "nodes.conf").write_text("Include more.conf\n")
    (tmp_path / "sub" / "more.conf").write_text("NodeName=n1 CPUs=2\n")
    (tmp_path / "alpha.conf").write_text("PartitionName=p Nodes=n1\n")
    m = slurm_conf_meaning(tmp_path)
    assert m.files == ("slurm.conf", "sub/nodes.conf", "sub/more.conf", "alpha.conf")
    assert m.partitions["p"]["nodes"] == ("n1",)


def test_comments_quotes_escapes_continuation_and_key_case() -> None:
    m = slurm_conf_meaning({"slurm.conf": (
        "# a comment\n"
        "   \n"
        'rebootprogram="/sbin/reboot --force"   # trailing comment\n'
        'HEALTHCHECKPROGRAM="/usr/sbin/nhc # not protected by quotes"\n'
        "MailProg=/usr/bin/mail\\#x\n"
        "nodename=n[1-2] \\\n"
        "   cpus=2 state=unknown\n"
        "SlurmctldHost=h1\nslurmctldhost=h2\nSlurmdTimeout=1\nSlurmdTimeout=2\n")})
    g = m.globals
    assert g["rebootprogram"] == "/sbin/reboot --force"
    # Slurm cuts at the first unescaped '#', inside quotes too; the unclosed quote stays in the value
    assert g["healthcheckprogram"] == '"/usr/sbin/nhc'
    assert g["mailprog"] == "/usr/bin/mail#x"
    assert g["slurmctldhost"] == ("h1", "h2") and g["slurmdtimeout"] == "2"
    assert m.nodes["n2"] == {"cpus": "2", "state": "UNKNOWN"}


def test_bad_line_names_file_and_line() -> None:
    with pytest.raises(SlurmConfError, match=r"^slurm.conf:2: "):
        slurm_conf_meaning({"slurm.conf": "A=1\nB=2 C=3\n"})


def test_gres_expansion_and_cgroup_booleans() -> None:
    g = gres_conf_meaning({"gres.conf": (
        "AutoDetect=NVML\n"
        "NodeName=n[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-1] COREs=3,0-2 Count=2\n")})
    h = gres_conf_meaning({"gres.conf": "".join(
        f"nodename=n{n} name=gpu type=a100 file=/dev/nvidia{d} cpus=0-3\n" for n in (1, 2) for d in (0, 1))
        + "autodetect=nvml\n"})
    assert g == h and len(g.lines) == 4 and g.autodetect == "nvml"
    assert "NodeName=n2 Cores=0,1,2,3 File=/dev/nvidia1 Name=gpu Type=a100" in g.lines
    assert cgroup_conf_meaning({"cgroup.conf": "ConstrainCores=YES\nconstrainramspace=1\nAllowedRAMSpace=100\n"}) == {
        "constraincores": "yes", "constrainramspace": "yes", "allowedramspace": "100"}


def test_same_meaning_written_differently() -> None:
    a = {"slurm.conf": "NodeName=DEFAULT CPUs=4\nNodeName=n[1-3]\nPartitionName=p Nodes=ALL Default=yes\n",
         "cgroup.conf": "ConstrainCores=yes\n"}
    b = {"slurm.conf": "PartitionName=p Default=YES Nodes=n1,n2,n3 # same\nNodeName=n1,n3 CPUs=4\nNodeName=n2 cpus=4\n",
         "cgroup.conf": "constraincores=true\n"}
    assert_same_meaning(a, b)


def test_real_difference_is_reported_readably() -> None:
    a = {"slurm.conf": "NodeName=n[1-4] CPUs=4 Gres=gpu:8\nPartitionName=p Nodes=n[1-4]\n",
         "gres.conf": "NodeName=n[1-4] Name=gpu File=/dev/nvidia[0-7]\n"}
    b = {"slurm.conf": "NodeName=n[1-3] CPUs=4 Gres=gpu:8\nNodeName=n4 CPUs=8 Gres=gpu:8\nPartitionName=p Nodes=n[1-3]\n",
         "gres.conf": "NodeName=n[1-4] Name=gpu File=/dev/nvidia[0-6]\n"}
    diff = meaning_diff(a, b)
    assert "node n4: cpus: A='4' B='8'" in diff
    assert "partition p: nodes: A=('n1', 'n2', 'n3', 'n4') B=('n1', 'n2', 'n3')" in diff
    assert "gres.conf only in A: NodeName=n4 File=/dev/nvidia7 Name=gpu" in diff
    with pytest.raises(AssertionError, match="node n4: cpus"):
        assert_same_meaning(a, b)


def test_legacy_control_machine_means_slurmctld_host() -> None:
    legacy = slurm_conf_meaning({"slurm.conf": "ControlMachine=a\nControlAddr=a\nBackupController=b\n"
                                                "BackupAddr=10.0.0.2\n"})
    modern = slurm_conf_meaning({"slurm.conf": "SlurmctldHost=a(a)\nSlurmctldHost=b(10.0.0.2)\n"})
    assert legacy.globals == modern.globals == {"slurmctldhost": ("a", "b(10.0.0.2)")}
    other = slurm_conf_meaning({"slurm.conf": "ControlMachine=a\nControlAddr=10.0.0.9\n"})
    assert other.globals != legacy.globals


def test_every_fixture_directory_is_listed(thirdparty: Path) -> None:
    assert {p.name for p in thirdparty.iterdir() if p.is_dir()} == set(EXPECTED)
    for name in EXPECTED:
        assert (thirdparty / name / "SOURCE.md").is_file()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_parses_as_its_source_says(name: str, thirdparty: Path) -> None:
    nodes, partitions, controllers = EXPECTED[name]
    m = slurm_conf_meaning(thirdparty / name)
    assert len(m.nodes) == nodes
    assert {p: len(v["nodes"]) for p, v in m.partitions.items()} == partitions
    assert len(m.globals["slurmctldhost"]) == controllers
    assert not m.duplicate_nodes and not m.duplicate_partitions
    assert cgroup_conf_meaning(thirdparty / name)
    assert meaning_diff(thirdparty / name, thirdparty / name) == []


def test_fixture_specifics(thirdparty: Path) -> None:
    deepops = slurm_conf_meaning(thirdparty / "deepops")
    assert deepops.nodes["dgx07"]["cpus"] == "256"  # CPUs=256 wins over Procs=128
    assert deepops.globals["rebootprogram"] == "/bin/systemctl reboot"
    assert gres_conf_meaning(thirdparty / "deepops").autodetect == "nvml"
    gcp = slurm_conf_meaning(thirdparty / "slurm_gcp_a3mega")
    assert gcp.files == ("slurm.conf", "cloud.conf")
    assert gcp.nodes["a3mega-debugnodes-3"]["cpus"] == "32" and "gres" not in gcp.nodes["a3mega-debugnodes-3"]
    assert len(gres_conf_meaning(thirdparty / "slurm_gcp_a3mega").lines) == 16 * 8
    tux = thirdparty / "schedmd_gpu_example"
    assert len(gres_conf_meaning(tux).lines) == 15 * 4 + 3
    assert slurm_conf_meaning(tux).nodes["tux3"]["gres"] == "gpu:3"
    man = slurm_conf_meaning(thirdparty / "schedmd_manpage_example")
    assert man.nodes["dev25"]["nodeaddr"] == "edev25" and man.nodes["dev25"]["state"] == "UNKNOWN"
    assert man.down_nodes == {"dev20": {"state": "DOWN", "reason": "power,ETA=Dec25"}}
