"""A desired state and package facts for the Slurm upgrade tests: slurmdbd on cpu01, slurmctld on ctl (the
controller), slurmd on gpu[01-02]; the installed versions from real dpkg status stanzas (22.05, Debian 12, as
this machine's dpkg has them) or synthetic ones at other releases, the same fields."""

from __future__ import annotations

from pathlib import Path

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.drivers import slurm_running
from reconciler.drivers.packages import PackagesDriver
from reconciler.drivers.slurm_upgrade import SlurmUpgradeDriver
from reconciler.engine.context import Context
from reconciler.engine.driver import Driver
from reconciler.engine.plan import Plan
from reconciler.engine.planner import make_plan
from reconciler.facts import packages as pkgfacts
from reconciler.facts.models import ClusterFacts, NodeFacts, SlurmNodeFact
from tests.drivers.base_state import write_state

RECORDED = (Path(__file__).parent / "facts" / "slurm-22.05-debian12.status").read_text()
DEBIAN_2205 = "22.05.8-4+deb12u3"
ROLES = {"cpu01": ["slurmdbd", "slurm-client"], "ctl": ["slurmctld", "slurm-client"],
         "gpu01": ["slurmd", "slurm-client"], "gpu02": ["slurmd", "slurm-client"]}


def status(names: list[str], version: str) -> str:
    """dpkg status stanzas of NAMES installed at VERSION (the recorded 22.05 ones when VERSION is Debian's)."""
    if version == DEBIAN_2205:
        return "\n\n".join(s for s in RECORDED.split("\n\n") if s.split("\n", 1)[0][9:] in names)
    return "\n\n".join(f"Package: {n}\nStatus: install ok installed\nArchitecture: amd64\nVersion: {version}"
                       for n in names)


def answer(names: list[str], installed: str, offered: list[str]) -> dict[str, object]:
    """The package snippet's answer on a Debian node: NAMES at INSTALLED, the repository offering OFFERED."""
    madison = "\n".join(f"{n} | {v} | http://repo ./ Packages" for n in names for v in offered)
    parts = ["backend apt", "status\n" + status(names, installed), "madison 0\n" + madison,
             "asked\n" + " ".join(names)]
    return {"rc": 0, "stdout": pkgfacts.SEP.join(parts), "stderr": ""}


def packages_yaml(versions: dict[str, str], backup: str | None = None) -> str:
    """`packages:` pinning each node's Slurm packages to VERSIONS[node] (`present`: unpinned)."""
    out = "packages:\n"
    for node, names in ROLES.items():
        out += f"  - nodes: {node}\n    allow_downgrade: true\n    packages:\n"
        out += "".join(f"      {n}: \"{versions[node]}\"\n" for n in names)
    if backup:
        out += f"rollout:\n  slurm_upgrade:\n    backup: \"{backup}\"\n"
    return out


def plan_for(tmp_path: Path, versions: dict[str, str], installed: dict[str, str], offered: list[str],
             backup: str | None = None, busy: dict[str, str] | None = None,
             running: dict[str, str] | None = None) -> Plan:
    """The plan of the package and Slurm-upgrade drivers with each node's Slurm packages at INSTALLED[node], OFFERED
    in the repo; RUNNING: node -> the output of its running-daemon facts (slurm_running.command), when gathered."""
    return make_plan(*state_for(tmp_path, versions, installed, offered, backup, busy, running))


def state_for(tmp_path: Path, versions: dict[str, str], installed: dict[str, str], offered: list[str],
              backup: str | None = None, busy: dict[str, str] | None = None,
              running: dict[str, str] | None = None) -> tuple[Context, list[Driver]]:
    """plan_for's context and drivers, before planning."""
    root = write_state(tmp_path / "repo", packages_yaml(versions, backup))
    ctx = Context(loaded=load_dir(root), source="test")
    ctx.facts = ClusterFacts(controller=ctx.controller)
    for name in node_specs(ctx.state):
        ctx.facts.nodes[name] = NodeFacts(node=name, reachable=True)
    packages = PackagesDriver()
    for node, names in ROLES.items():
        packages.absorb(ctx, ctx.facts, node, ctx.facts.nodes[node],
                        {pkgfacts.FACTS_KEY: answer(names, installed[node], offered)})
    upgrade = SlurmUpgradeDriver()
    for node, text in (running or {}).items():
        upgrade.absorb(ctx, ctx.facts, node, ctx.facts.nodes[node],
                       {slurm_running.FACTS_KEY: {"rc": 0, "stdout": text, "stderr": ""}})
    for node, state in (busy or {}).items():
        ctx.facts.slurm_nodes[node] = SlurmNodeFact(name=node, state=state)
    return ctx, [packages, upgrade]
