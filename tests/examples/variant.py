"""Testbed-sized variants of the reference examples (desired-state/examples/): same resources, fewer nodes.

A variant keeps every resource file of its example (storage, files, services, patches, images, checks)
with the example's host names mapped onto the testbed's (`dgx[01-10]` -> `gpu[01-02]`, `login01` -> `ctl`),
and takes the Slurm hardware core from the testbed's own desired state: slurm.conf keys that need what a
namespace node has not (cgroups, PMIx, real GPUs) and the node sets' CPUs/memory come from the testbed, as
does the inventory. Cluster-level keys that are resources (mode, munge key, prolog) come from the example.
The NCCL checks run the testbed's all_reduce_perf stand-in (replayed 8x H200 output) without a container.
"""

from __future__ import annotations

import io
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "desired-state" / "examples"
# No Pyxis on the testbed: its SPANK line is made optional there (slurmd refuses to start on a missing
# `required` plugin, as it would on a real node without Pyxis installed).
PYXIS = {"required /usr/local/lib/slurm/spank_pyxis.so": "optional /usr/local/lib/slurm/spank_pyxis.so"}
SUBNET = "{subnet}"  # replaced by the testbed's /24
CTL_IP = "{ctl_ip}"  # replaced by ctl's address (the Lustre stand-in's MGS)


# On A3-Mega nodes the rxdm prolog installs the TCPXO plugin and its profile; the testbed has neither, so the
# variant manages a STAND-IN profile (the NCCL check sources it first, as on the real cluster).
TCPXO_PROFILE_STANDIN = """\
files:
  - path: /var/lib/tcpxo/lib64/nccl-env-profile.sh
    roles: [compute]
    content: |
      # STAND-IN (testbed only) for the TCPXO plugin's nccl-env-profile.sh
      export NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL=0
"""


@dataclass(frozen=True)
class Variant:
    """How one example maps onto a testbed."""

    example: str
    renames: dict[str, str]
    cluster_keys: tuple[str, ...] = ()
    mounts: tuple[str, ...] = ()
    nccl_check: str | None = None
    extra: dict[str, str] = field(default_factory=dict)  # file name -> YAML added for the testbed only


VARIANTS = {
    "deepops-perf": Variant(
        "deepops-perf",
        {"login01,dgx[01-10]": "ctl,gpu[01-02]", "dgx[01-10]": "gpu[01-02]", "nfs01:": "ctl:", "nfs01": "ctl",
         "login01": "ctl", "10.0.0.0/24": SUBNET, **PYXIS},
        mounts=("/home", "/shared"), nccl_check="validation-allreduce"),
    "dgx-pod-bastion": Variant(
        "dgx-pod-bastion",
        {"login01,dgx[01-08]": "ctl,gpu[01-02]", "dgx[01-07]": "gpu[01-02]", "dgx[01-08]": "gpu[01-02]",
         "10.10.0.1:": "ctl:", "mgmt01": "ctl", "login01": "ctl", "192.168.1.0/24": SUBNET,
         "10.10.0.10": "ctl", **PYXIS},
        mounts=("/home",), nccl_check="nightly-allreduce"),
    "a3-mega-lustre": Variant(
        "a3-mega-lustre",
        {"a3mega-login-001,a3mega-a3meganodeset-[0-15]": "ctl,gpu[01-02]",
         "a3mega-a3meganodeset-[0-15]": "gpu[01-02]", "a3mega-controller": "ctl", "a3mega-login-001": "ctl",
         "partition: a3mega": "partition: batch", "10.1.0.5@tcp:/exacloud": f"{CTL_IP}@tcp:/lustrefs"},
        cluster_keys=("mode", "prolog"), mounts=("/home",), nccl_check="tcpxo-allreduce",
        extra={"testbed-standins.yaml": TCPXO_PROFILE_STANDIN}),
    "cloud-supervisord": Variant(
        "cloud-supervisord",
        {"100.101.1.1:": "ctl:", "head,cloud-[01-04]": "ctl,gpu[01-02]", "cloud-[01-04]": "gpu[01-02]",
         "100.64.0.0/10": SUBNET, "head": "ctl", "partition: all": "partition: batch",
         '{name: slurmd, nodes: "head,cloud-[01-04]"}': '{name: slurmd, nodes: "gpu[01-02]"}'},
        mounts=("/mnt/shared-slurm",), nccl_check="vpn-pairs"),
}


def _yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def rename(text: str, renames: dict[str, str], subnet: str) -> str:
    """The example's names replaced by the testbed's, longest first, whole words only."""
    for old in sorted(renames, key=len, reverse=True):
        new = renames[old].replace(SUBNET, f"{subnet}.0/24").replace(CTL_IP, f"{subnet}.1")
        text = re.sub(rf"(?<![\w.-]){re.escape(old)}(?![\w-])", new, text)
    return text


def _adapt_checks(data: dict[str, Any]) -> None:
    """No nvidia-smi, container runtime or PMIx on the testbed: GPU probes dropped, NCCL on the stand-in."""
    checks = data.get("checks") or {}
    for check in checks.get("node") or []:
        check.pop("gpus", None)
    for check in checks.get("nccl") or []:
        check["binary"] = "all_reduce_perf"
        check.pop("container_image", None)
        check.pop("container_mounts", None)
        check["mpi"] = "pmi2"
        check["timeout"] = "2m"
        check.pop("schedule", None)


def build(variant: Variant, testbed_desired: Path, out: Path, subnet: str) -> Path:
    """Write the variant's desired-state directory to OUT and return it."""
    yaml = _yaml()
    example = EXAMPLES / variant.example
    out.mkdir(parents=True)
    shutil.copy(testbed_desired / "nodes.yaml", out / "nodes.yaml")
    core = yaml.load((testbed_desired / "cluster.yaml").read_text())
    core["cluster"].pop("prolog", None)
    wanted = yaml.load(rename((example / "cluster.yaml").read_text(), variant.renames, subnet))["cluster"]
    for key in variant.cluster_keys:
        if key in wanted:
            core["cluster"][key] = wanted[key]
    buf = io.StringIO()
    yaml.dump(core, buf)
    (out / "cluster.yaml").write_text(buf.getvalue())
    for path in sorted(example.rglob("*")):
        relative = path.relative_to(example)
        if path.is_dir() or relative.name in ("cluster.yaml", "nodes.yaml", "README.md"):
            continue
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix not in (".yaml", ".yml"):
            shutil.copy(path, target)
            continue
        text = rename(path.read_text(), variant.renames, subnet)
        if relative.name == "checks.yaml":
            data = yaml.load(text)
            _adapt_checks(data)
            buf = io.StringIO()
            yaml.dump(data, buf)
            text = buf.getvalue()
        target.write_text(text)
    for name, text in variant.extra.items():
        (out / name).write_text(text)
    return out
