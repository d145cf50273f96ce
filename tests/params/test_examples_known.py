"""Every key the example desired states and the schema's typed fields use is a known parameter in its families;
and Debian's real Slurm 22.05 parser accepts the keys the tables give 22.05."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler import params

REPO = Path(__file__).resolve().parents[2]
SUPPORTED = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")  # the range, and newer

# Keys the renderer writes from schema fields that are not slurm.conf-named (reconciler/render).
RENDERED_GLOBAL = ("ClusterName", "SlurmctldHost", "Prolog", "Epilog", "HealthCheckProgram", "HealthCheckInterval",
                   "HealthCheckNodeState")
RENDERED_PARTITION = ("Nodes", "Default", "State", "MaxTime")
RENDERED_NODE = ("NodeName", "Gres", "Features", "State", "Weight")
GRES_LINE_FIELDS = {"nodes": "NodeName", "name": "Name", "type": "Type", "file": "File", "count": "Count",
                    "cores": "Cores", "links": "Links"}


def _check(file: str, keys: Any, family: str, scope: str = "global") -> None:
    for key in keys:
        params.resolve(file, key, family, scope)  # raises with the reason


def _cluster(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load(path.read_text())
    return data["cluster"]


def _uses(cluster: dict[str, Any]) -> None:
    family = str(cluster["slurm_version"])
    conf = dict(cluster.get("slurm_conf", {}))
    extra = conf.pop("extra", {})
    _check("slurm.conf", list(conf) + list(extra) + list(RENDERED_GLOBAL), family)
    for node_set in cluster.get("node_sets", []):
        keys = [k for k in node_set if k[0].isupper()] + list(node_set.get("params", {}))
        _check("slurm.conf", keys + list(RENDERED_NODE), family, "node")
    for partition in cluster.get("partitions", []):
        keys = [k for k in partition if k[0].isupper()] + list(partition.get("params", {}))
        _check("slurm.conf", keys + list(RENDERED_PARTITION) + ["PartitionName"], family, "partition")
    gres = cluster.get("gres") or {}
    if gres.get("auto_detect"):
        _check("gres.conf", ["AutoDetect"], family)
    for line in gres.get("lines", []):
        _check("gres.conf", [GRES_LINE_FIELDS[k] for k in line], family, "line")
    cgroup = dict(cluster.get("cgroup") or {})
    _check("cgroup.conf", list(cgroup.pop("extra", {})) + list(cgroup), family)


def test_example_desired_state_keys_are_known_in_its_family() -> None:
    cluster = _cluster(REPO / "desired-state" / "cluster.yaml")
    assert cluster["slurm_version"] == "23.11"
    _uses(cluster)


def test_testbed_desired_state_keys_are_known_in_22_05() -> None:
    from deploy.testbed import desired_state
    for key in desired_state.SLURM_CONF:
        params.resolve("slurm.conf", key, "22.05")
    layout = {"name": "t", "computes": "gpu[1-2]", "cpus": 4, "memory": 1024, "gpus": 2}
    text = desired_state.cluster_yaml(layout)
    _uses(YAML(typ="safe").load(text)["cluster"])


@pytest.mark.parametrize("family", SUPPORTED)
def test_typed_schema_fields_are_parameters_of_every_supported_family(family: str) -> None:
    from reconciler import model
    typed = [n for n in model.SlurmConfParams.model_fields if n != "extra"]
    _check("slurm.conf", typed, family)
    node = [f.alias for f in model.NodeSet.model_fields.values() if f.alias]
    _check("slurm.conf", node, family, "node")
    part = [f.alias for f in model.Partition.model_fields.values() if f.alias]
    _check("slurm.conf", part, family, "partition")
    _check("cgroup.conf", [n for n in model.CgroupConf.model_fields if n != "extra"], family)
    _check("gres.conf", [GRES_LINE_FIELDS[n] for n in model.GresLine.model_fields if n != "params"], family, "line")


def test_cgroup_plugin_is_not_a_20_11_key() -> None:
    """A finding, not a wish: the schema offers CgroupPlugin for every family, but 20.11 does not parse it."""
    with pytest.raises(params.ParameterNotInVersion, match="first in 21.08"):
        params.resolve("cgroup.conf", "CgroupPlugin", "20.11")


# ---------------------------------------------------------------- against the real parser

NEEDS_SLURM = pytest.mark.skipif(not (shutil.which("scontrol") and shutil.which("slurmctld")),
                                 reason="needs Debian's slurm-client and slurmctld packages")
SAMPLE = {"int": "1", "bool": "yes", "float": "1.0", "string": "x"}
# Keys the parser handles itself (line heads, repeatable arrays) or whose value it checks while parsing.
SKIP = {"global": {"ClusterName", "SlurmctldHost"},
        "node": {"NodeName", "State", "NodeHostname", "NodeAddr", "Port", "BcastAddr", "Reason"},
        "partition": {"PartitionName", "Nodes", "State", "Shared", "OverSubscribe", "AllowGroups"}}


def _scontrol(tmp_path: Path, lines: list[str]) -> str:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\n" + "\n".join(lines) + "\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    done = subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def _installed_family() -> str:
    """`slurmctld -V` prints e.g. `slurm-wlm 22.05.8` (scontrol -V would need a configuration first)."""
    out = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True, check=False).stdout.split()
    return ".".join(out[-1].split(".")[:2]) if out else ""


@pytest.mark.slurm
@NEEDS_SLURM
def test_real_parser_accepts_every_key_the_tables_give_its_version(tmp_path: Path) -> None:
    family = _installed_family()
    if family not in params.families():
        pytest.skip(f"installed Slurm {family!r} is outside the tables")
    lines = [f"{p.name}={SAMPLE[p.type]}" for p in params.parameters("slurm.conf", "global", family)
             if p.c_type != "S_P_ARRAY" and p.name not in SKIP["global"]]
    for scope, head in (("node", "NodeName=n1"), ("partition", "PartitionName=p1")):
        keys = [f"{p.name}={SAMPLE[p.type]}" for p in params.parameters("slurm.conf", scope, family)
                if p.name not in SKIP[scope]]
        lines.append(" ".join([head, *keys]))
    assert len(lines) > 150
    out = _scontrol(tmp_path, lines)
    assert "unrecognized key" not in out, out  # later value checks may still complain: only parsing is tested


@pytest.mark.slurm
@NEEDS_SLURM
def test_real_parser_refuses_a_key_the_tables_date_later(tmp_path: Path) -> None:
    family = _installed_family()
    if family not in params.families():
        pytest.skip(f"installed Slurm {family!r} is outside the tables")
    order = params.families().index
    later = [p for p in params.parameters("slurm.conf", "global")
             if p.families and order(p.families[0]) > order(family) and p.c_type != "S_P_ARRAY"]
    assert later, "the tables know keys newer than the installed Slurm"
    for param in later[:5]:
        out = _scontrol(tmp_path, [f"{param.name}={SAMPLE[param.type]}"])
        assert f"unrecognized key: {param.name}" in out, (param.name, out)
