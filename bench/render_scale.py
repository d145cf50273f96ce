"""Time load+validate and rendering of every managed file for desired states of 1,000 and 10,000 nodes.

Run: `python -m bench.render_scale [--sizes 1000,10000] [--runs 5]`.
The 10,000-node render must stay under 1 s (exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from reconciler.common import hostlist
from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.model import DesiredState
from reconciler.render import managed_files_for, render_file

NODE_SETS = 4
RENDER_BUDGET_S = 1.0
SHARED_FILES = ("slurm.conf", "gres.conf", "cgroup.conf")  # identical on every node: rendered once


def _width(nodes: int) -> int:
    return max(5, len(str(nodes)))


def gpu_range(first: int, last: int, width: int) -> str:
    """A hostlist such as `gpu[00001-02500]`."""
    return f"gpu[{first:0{width}d}-{last:0{width}d}]"


def _dump(path: Path, data: dict[str, Any]) -> None:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    with path.open("w") as out:
        yaml.dump(data, out)


def write_desired_state(root: Path, nodes: int) -> None:
    """Write a desired-state directory with `nodes` GPU nodes split over a few node sets and partitions."""
    width = _width(nodes)
    per_set = nodes // NODE_SETS
    bounds = [(i * per_set + 1, nodes if i == NODE_SETS - 1 else (i + 1) * per_set) for i in range(NODE_SETS)]
    racks = [gpu_range(lo, hi, width) for lo, hi in bounds]
    everyone = gpu_range(1, nodes, width)
    hardware = {"CPUs": 224, "Sockets": 2, "CoresPerSocket": 56, "ThreadsPerCore": 2, "RealMemory": 2000000}
    cluster = {
        "name": "scale",
        "slurm_version": "23.11",
        "controllers": ["login01"],
        "slurm_conf": {"SlurmctldPort": 6817, "AuthType": "auth/munge", "SelectType": "select/cons_tres",
                       "SchedulerType": "sched/backfill", "GresTypes": "gpu", "ReturnToService": 1},
        "node_sets": [
            {
                "nodes": rack,
                **hardware,
                "Features": ["h200", f"rack{i}"],
                "gpus": {"count": 8, "type": "h200"},
                "State": "UNKNOWN",
            }
            for i, rack in enumerate(racks)
        ],
        "partitions": [
            {"name": "all", "nodes": everyone, "default": True, "MaxTime": "UNLIMITED", "State": "UP"},
            *({"name": f"rack{i}", "nodes": rack, "MaxTime": "2-00:00:00", "State": "UP"}
              for i, rack in enumerate(racks)),
        ],
        "gres": {
            "auto_detect": "nvml",
            "lines": [{"nodes": everyone, "name": "gpu", "type": "h200", "file": "/dev/nvidia[0-7]"}],
        },
        "cgroup": {"ConstrainCores": True, "ConstrainDevices": True, "ConstrainRAMSpace": True},
        "prolog": "/etc/slurm/prolog.sh",
        "health_check": {"program": "/usr/sbin/nhc"},
    }
    _dump(root / "cluster.yaml", {"cluster": cluster})
    _dump(
        root / "nodes.yaml",
        {
            "nodes": [
                {"name": "login01", "roles": ["controller", "login"]},
                {"name": "nfs01", "roles": ["nfs-server"]},
                {
                    "name": everyone,
                    "host": "{name}.cluster.internal",
                    "proxy_jump": "bastion",
                    "roles": ["compute"],
                },
            ]
        },
    )
    clients = "login01," + everyone
    _dump(
        root / "storage.yaml",
        {
            "storage": {
                "exports": [
                    {"server": "nfs01", "path": f"/export/{share}", "clients": ["10.0.0.0/16"]}
                    for share in ("home", "shared")
                ],
                "mounts": [
                    {"source": "nfs01:/export/home", "mountpoint": "/home", "nodes": clients},
                    {"source": "nfs01:/export/shared", "mountpoint": "/shared", "nodes": clients},
                    {
                        "source": "10.1.0.1@tcp:/lfs",
                        "mountpoint": "/lustre",
                        "type": "lustre",
                        "options": ["defaults", "_netdev", "flock"],
                        "nodes": gpu_range(1, nodes // 2, width),
                    },
                ],
            }
        },
    )
    _dump(
        root / "checks.yaml",
        {
            "checks": {
                "node": [{"name": "basics", "nodes": everyone, "mounts": ["/home", "/shared"]}],
                "nccl": [{"name": "nightly", "partition": "all", "schedule": "daily 02:30"}],
            }
        },
    )


def render_all(state: DesiredState, source: str) -> int:
    """Render every managed file of every node (shared Slurm files once); return the bytes rendered."""
    shared: dict[str, str] = {}
    total = 0
    for node in node_specs(state):
        for name in managed_files_for(state, node):
            if name in SHARED_FILES:
                if name not in shared:
                    shared[name] = render_file(state, node, name, source)
                    total += len(shared[name])
                continue
            total += len(render_file(state, node, name, source))
    return total


def _median_s(func: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _fresh(state: DesiredState) -> DesiredState:
    """A copy of the state, so per-state caches start cold in every run."""
    return state.model_copy(deep=True)


def bench(nodes: int, runs: int) -> dict[str, Any]:
    """Measure one size; hostlist caches are cleared before each run so no run profits from the last."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_desired_state(root, nodes)

        def load() -> DesiredState:
            hostlist.clear_cache()
            return load_dir(root).state

        load_s, state = _median_s(load, runs)
    count = len(node_specs(state))
    states = [_fresh(state) for _ in range(runs)]

    def render() -> int:
        hostlist.clear_cache()
        return render_all(states.pop(), "bench")

    render_s, rendered = _median_s(render, runs)
    tracemalloc.start()
    hostlist.clear_cache()
    render_all(_fresh(state), "bench")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "nodes": count,
        "load_s": load_s,
        "render_s": render_s,
        "bytes": rendered,
        "peak_mib": peak / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 when the largest state renders slower than the budget."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated node counts")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median reported)")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"{'nodes':>8} {'load+validate':>14} {'render all':>11} {'rendered':>10} {'render peak':>12}")
    results = []
    for size in sizes:
        row = bench(size, args.runs)
        results.append(row)
        print(
            f"{row['nodes']:>8} {row['load_s'] * 1000:>11.1f} ms {row['render_s'] * 1000:>8.1f} ms "
            f"{row['bytes'] / 2**20:>6.2f} MiB {row['peak_mib']:>8.1f} MiB"
        )
    import resource

    print(
        f"process peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB "
        f"(median of {args.runs} runs; render = every managed file of every node)"
    )
    largest = max(results, key=lambda row: row["nodes"])
    if largest["render_s"] >= RENDER_BUDGET_S:
        print(
            f"FAIL: {largest['nodes']} nodes render in {largest['render_s']:.2f} s "
            f"(budget {RENDER_BUDGET_S} s)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
