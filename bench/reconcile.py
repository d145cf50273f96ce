"""One-line change on testbed nodes: our apply against ansible-playbook (the no-op section is bench/peers.py).

For each N a bare testbed (N compute nodes + ctl) is brought up and converged by `reconciler apply`.
Both tools then run against the same nodes over the same SSH (the testbed's ssh_config, known_hosts and
key), alternately, so that the machine's noise hits both alike; ratios are taken within each pair.

- change: one partition's MaxTime differs in the desired state. Ours always moves the cluster to value A,
  Ansible's inventory always to value B, so every run of either tool changes exactly one line of
  slurm.conf on every node and runs `scontrol reconfigure` once (Ansible: a handler).

Round trips: ours from the SSH transport's counter (`bench.counted_cli`); Ansible's by counting its ssh
and sftp invocations through logging wrappers (`bench.ansible_project`), each one SSH session.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.ansible_project import AnsibleProject, recap
from bench.common import Timed, log, median, python_env, timed_run
from bench.testbed import BenchTestbed

CHANGE_PARTITION_INDEX = -1  # the testbed's `batch` partition
CHANGE_VALUES = ("2-00:00:00", "1-00:00:00")  # (ours sets, Ansible sets)


@dataclass
class Pair:
    """One run of each tool: wall seconds and SSH round trips per node."""

    ours_s: float
    ansible_s: float
    ours_trips: dict[str, int]
    ansible_trips: dict[str, int]

    @property
    def ratio(self) -> float:
        """How many times longer Ansible took than ours."""
        return self.ansible_s / self.ours_s if self.ours_s else 0.0


@dataclass
class Measured:
    """Every pair of one section at one N."""

    section: str
    computes: int
    pairs: list[Pair] = field(default_factory=list)
    forks: int = 0

    def row(self) -> dict[str, Any]:
        """The table row: medians of wall time and ratio, round trips per node."""
        def per_node(trips: list[dict[str, int]]) -> float:
            return median([sum(t.values()) / max(1, len(t)) for t in trips])

        def spread(trips: list[dict[str, int]]) -> list[int]:
            values = [v for t in trips for v in t.values()]
            return [min(values), max(values)] if values else [0, 0]

        ours = [p.ours_trips for p in self.pairs]
        theirs = [p.ansible_trips for p in self.pairs]
        return {
            "section": self.section,
            "computes": self.computes,
            "nodes": self.computes + 1,
            "runs": len(self.pairs),
            "ours_s": median([p.ours_s for p in self.pairs]),
            "ansible_s": median([p.ansible_s for p in self.pairs]),
            "ratio": median([p.ratio for p in self.pairs]),
            "ours_runs_s": [round(p.ours_s, 3) for p in self.pairs],
            "ansible_runs_s": [round(p.ansible_s, 3) for p in self.pairs],
            "ratios": [round(p.ratio, 2) for p in self.pairs],
            "ours_trips_per_node": per_node(ours),
            "ours_trips_range": spread(ours),
            "ansible_trips_per_node": per_node(theirs),
            "ansible_trips_range": spread(theirs),
            "ansible_forks": self.forks,
        }


def ours(*args: str, work: Path) -> tuple[Timed, dict[str, int]]:
    """Run `reconciler ARGS` (the CLI's own main) and return it with its per-node round trips."""
    counters = work / "round-trips.json"
    counters.unlink(missing_ok=True)
    done = timed_run([sys.executable, "-m", "bench.counted_cli", str(counters), *args], env=python_env(),
                     timeout=1800)
    trips = json.loads(counters.read_text())["round_trips"] if counters.exists() else {}
    return done, trips


def _check_recap(done: Timed, hosts: list[str], *, changed: bool) -> None:
    """Every host ok and unreachable/failed 0; changed=0 on all (noop) or >0 on all (change)."""
    stats = recap(done.stdout)
    problems = [h for h in hosts if h not in stats or stats[h]["failed"] or stats[h]["unreachable"]
                or (stats[h]["changed"] > 0) != changed]
    if done.returncode != 0 or problems:
        raise RuntimeError(f"ansible-playbook did not {'change' if changed else 'keep'} every node as expected "
                           f"(rc {done.returncode}; hosts {problems[:5]}):\n{done.tail(40)}")


def set_max_time(desired: Path, index: int, value: str) -> str:
    """Set MaxTime of one partition in cluster.yaml (in place, comments kept); return the old value."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    path = desired / "cluster.yaml"
    data = yaml.load(path.read_text())
    partition = data["cluster"]["partitions"][index]
    old = str(partition["MaxTime"])
    partition["MaxTime"] = value
    with path.open("w") as out:
        yaml.dump(data, out)
    return old


def partition_max_time(bed: BenchTestbed, partition: str) -> str:
    """MaxTime of a partition as slurmctld has it now (`scontrol show partition` on ctl)."""
    out = subprocess.run(["ssh", "-F", str(bed.ssh_config), "ctl", f"scontrol show partition {partition} -o"],
                         capture_output=True, text=True, timeout=60, check=False).stdout
    match = re.search(r"MaxTime=(\S+)", out)
    return match.group(1) if match else "?"


def change_pair(bed: BenchTestbed, project: AnsibleProject, partition: str) -> Pair:
    """Ours moves MaxTime to A (apply --yes), then Ansible moves it back to B (playbook + handler)."""
    done, trips = ours("apply", str(bed.desired), "--yes", work=bed.work)
    if done.returncode != 0 or "scontrol reconfigure" not in done.stdout:
        raise RuntimeError(f"reconciler apply failed or did not reconfigure (exit {done.returncode}):\n"
                           f"{done.tail(40)}")
    if partition_max_time(bed, partition) != CHANGE_VALUES[0]:
        raise RuntimeError(f"after our apply slurmctld does not show MaxTime={CHANGE_VALUES[0]}")
    theirs = project.run()
    _check_recap(theirs, bed.nodes, changed=True)
    if "RUNNING HANDLER [scontrol reconfigure]" not in theirs.stdout:
        raise RuntimeError(f"Ansible's handler did not run:\n{theirs.tail(40)}")
    if partition_max_time(bed, partition) != CHANGE_VALUES[1]:
        raise RuntimeError(f"after Ansible's run slurmctld does not show MaxTime={CHANGE_VALUES[1]}")
    return Pair(done.seconds, theirs.seconds, trips, project.count_round_trips())


def measure(computes: int, index: int, runs: int, sections: list[str], forks: int | None = None,
            pipelining: bool = False) -> list[Measured]:
    """Bring up one testbed and run the chosen sections (change) on it; always tear it down."""
    out: list[Measured] = []
    with BenchTestbed(computes, index) as bed:
        project = AnsibleProject(root=bed.work / "ansible", ssh_config=bed.ssh_config, hosts=bed.nodes,
                                 forks=forks or min(64, len(bed.nodes)), pipelining=pipelining)
        project.write(bed.desired)
        if "change" in sections:
            partition = project.inventory_data["all"]["children"]["slurm"]["vars"]["slurm_partitions"][
                CHANGE_PARTITION_INDEX]["PartitionName"]
            original = set_max_time(bed.desired, CHANGE_PARTITION_INDEX, CHANGE_VALUES[0])
            project.set_partition(partition, "MaxTime", CHANGE_VALUES[1])
            if original != CHANGE_VALUES[1]:
                raise RuntimeError(f"partition {partition} starts at MaxTime={original}, not {CHANGE_VALUES[1]}")
            change = Measured("change", computes, forks=project.forks)
            try:
                for run in range(runs):
                    pair = change_pair(bed, project, partition)
                    change.pairs.append(pair)
                    log(f"change N={computes} run {run + 1}: ours {pair.ours_s:.2f} s, "
                        f"ansible {pair.ansible_s:.2f} s ({pair.ratio:.1f}x)")
            finally:
                set_max_time(bed.desired, CHANGE_PARTITION_INDEX, original)
            out.append(change)
        project.close_masters()
    return out
