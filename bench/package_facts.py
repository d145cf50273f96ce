"""What package facts add to a no-op plan (issue 33): `reconciler plan` with and without a `packages:` section.

Run (root, the testbed's Debian packages): `python -m bench.package_facts [--nodes 16] [--runs 7]`.
One bare testbed of N compute nodes + ctl, converged by `reconciler apply`; then two desired states that differ
only by packages.yaml, naming PACKAGES (installed on every node; their exact versions read from ctl with
dpkg-query) on every node. Both must plan to nothing (exit 0), with one SSH session per node. Each run plans
both, in alternating order; reported: medians of wall time and client CPU, the median of the per-run ratios.
Goal: the ratio under 1.10.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import common
from bench.common import RESULTS, Timed, compile_bytecode, load_average, log, machine
from bench.reconcile import ours
from bench.testbed import BenchTestbed, unavailable
from reconciler.common import hostlist

# Real Debian packages every testbed node has (the host's, seen through the node's overlay).
PACKAGES = ["tzdata", "libc6", "bash", "coreutils", "openssh-server", "python3", "munge", "slurmd",
            "slurm-client", "supervisor"]
GOAL = 1.10


def installed_versions(bed: BenchTestbed, names: list[str]) -> dict[str, str]:
    """The installed version of each of NAMES on ctl (dpkg-query); a name not installed there is left out."""
    done = bed.exec("ctl", "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Status}\\n' " + " ".join(names))
    versions = {}
    for line in done.stdout.splitlines():
        name, version, state = line.split("\t")
        if state == "installed":
            versions[name.split(":")[0]] = version
    return versions


def write_packages(desired: Path, nodes: list[str], versions: dict[str, str]) -> None:
    """Add packages.yaml to DESIRED: every node keeps VERSIONS exactly."""
    lines = ["packages:", f"  - nodes: {hostlist.compress(nodes)}", "    packages:"]
    lines += [f'      {name}: "{version}"' for name, version in sorted(versions.items())]
    (desired / "packages.yaml").write_text("\n".join(lines) + "\n")


def _plan(desired: Path, work: Path, nodes: list[str]) -> Timed:
    """`reconciler plan DESIRED`: exit 0 (nothing to do) and one SSH session per node required."""
    done, trips = ours("plan", str(desired), work=work)
    if done.returncode != 0:
        raise RuntimeError(f"plan of {desired.name} is not a no-op (exit {done.returncode}):\n{done.tail(30)}")
    if trips and any(trips.get(n, 0) != 1 for n in nodes):
        raise RuntimeError(f"plan of {desired.name}: round trips per node {trips}, expected 1 each")
    return done


def check_planned(desired: Path, nodes: list[str], versions: dict[str, str]) -> None:
    """Every named package is planned (ok) on every node: the section is read, its facts gathered."""
    done = common.timed_run(common.reconciler_argv("plan", str(desired), "--format", "json", "--per-node"),
                            env=common.python_env())
    planned = {(c["node"], c["resource"]) for c in json.loads(done.stdout)["changes"]
               if c["driver"] == "packages" and c["action"] == "ok"}
    missing = {(n, f"package {p}") for n in nodes for p in versions} - planned
    if done.returncode != 0 or missing:
        raise RuntimeError(f"packages not planned ok (exit {done.returncode}): {sorted(missing)[:5]}")


def measure(computes: int, runs: int) -> dict[str, Any]:
    """Plan without and with packages.yaml, RUNS times each in alternating order, on one testbed."""
    with BenchTestbed(computes, 0) as bed:
        versions = installed_versions(bed, PACKAGES)
        if len(versions) < 8:
            raise RuntimeError(f"only {sorted(versions)} of {PACKAGES} are installed on the testbed")
        with_packages = bed.work / "with-packages"
        shutil.copytree(bed.desired, with_packages)
        write_packages(with_packages, bed.nodes, versions)
        check_planned(with_packages, bed.nodes, versions)
        base: list[Timed] = []
        extra: list[Timed] = []
        _plan(bed.desired, bed.work, bed.nodes), _plan(with_packages, bed.work, bed.nodes)  # warm the page cache
        load_before = load_average()
        for run in range(runs):
            order = [(bed.desired, base), (with_packages, extra)]
            for desired, into in order if run % 2 == 0 else reversed(order):
                into.append(_plan(desired, bed.work, bed.nodes))
            log(f"run {run + 1}/{runs}: without {base[-1].seconds:.3f} s, with packages {extra[-1].seconds:.3f} s")
        load_after = load_average()
    ratios = [b.seconds / a.seconds for a, b in zip(base, extra, strict=True)]
    cpu_ratios = [b.cpu / a.cpu for a, b in zip(base, extra, strict=True)]
    return {
        "computes": computes, "runs": runs, "packages": versions,
        "without_s": [round(t.seconds, 3) for t in base], "with_s": [round(t.seconds, 3) for t in extra],
        "without_cpu_s": [round(t.cpu, 3) for t in base], "with_cpu_s": [round(t.cpu, 3) for t in extra],
        "without_median_s": round(statistics.median(t.seconds for t in base), 3),
        "with_median_s": round(statistics.median(t.seconds for t in extra), 3),
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_of_medians": round(statistics.median(t.seconds for t in extra)
                                  / statistics.median(t.seconds for t in base), 3),
        "cpu_ratio_median": round(statistics.median(cpu_ratios), 3),
        "load_before": load_before, "load_after": load_after,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurement, print the table, write bench/results/package-facts-DATE.json."""
    p = argparse.ArgumentParser(prog="python -m bench.package_facts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=16, help="compute nodes (default 16)")
    p.add_argument("--runs", type=int, default=7, help="runs, each planning both desired states (default 7)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes (default bench/results)")
    args = p.parse_args(argv)
    why = unavailable()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 1
    compile_bytecode()
    result = measure(args.nodes, args.runs)
    result.update(machine=machine(), python=sys.version.split()[0], date=datetime.date.today().isoformat())
    met = result["ratio_median"] < GOAL
    print(f"| compute nodes (+ctl) | plan | wall (median) | client CPU (median) | runs, s |\n|---|---|---|---|---|\n"
          f"| {args.nodes} (+1) | no-op, no `packages:` | {result['without_median_s']:.2f} s | "
          f"{statistics.median(result['without_cpu_s']):.2f} s | {', '.join(map(str, result['without_s']))} |\n"
          f"| {args.nodes} (+1) | no-op, `packages:` naming {len(result['packages'])} | "
          f"{result['with_median_s']:.2f} s | "
          f"{statistics.median(result['with_cpu_s']):.2f} s | {', '.join(map(str, result['with_s']))} |\n\n"
          f"with / without (median of per-run ratios): wall {result['ratio_median']:.3f} (ratio of the medians "
          f"{result['ratio_of_medians']:.3f}), client CPU "
          f"{result['cpu_ratio_median']:.3f}; goal < {GOAL}: {'met' if met else 'NOT met'}; "
          f"load average before {result['load_before']}, after {result['load_after']}")
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"package-facts-{result['date']}.json"
    target.write_text(json.dumps(result, indent=2) + "\n")
    log(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
