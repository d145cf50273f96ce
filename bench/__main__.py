"""`python -m bench`: every benchmark of issue 8 in one command; tables on stdout, files in bench/results/.

Sections (`--sections`, default all):
  noop    no-op reconcile on testbeds of N compute nodes + ctl: `reconciler plan` against the peers in the
          same run (--peers): Ansible with its best settings (bench/ansible/playbook.yml, --check --diff),
          `pyinfra --dry` (bench/pyinfra_project.py), and the floor: `true` per node over OpenSSH and paramiko
  drift   steady-state drift check of the daemon's loop over persistent SSH sessions against a cold
          `reconciler plan`, and the peers with their connections kept (bench/peers.py)
  change  one-line change applied (a partition's MaxTime): `reconciler apply --yes` vs ansible-playbook
          with a `scontrol reconfigure` handler
  scale   render + diff of 1,000 and 10,000 nodes against synthesised facts (pure CPU)
  nccl    GPU-seconds to an NCCL verdict, full sweep vs the check's default sizes (recorded runs)
  daemon  commit-to-applied latency of the daemon, poll (Git) and watch (local dir) modes, on N nodes
  hostile costly and hostile desired-state files at the loader's size limit: seconds and peak memory to read
          or refuse each (tests/desired/hostile/worst_cases.py)
  rollout progressive rollouts with `reconciler run` on real Slurm (--rollout-nodes, default 16,64): a bad
          commit's prolog rolled back (push -> gate failed -> every node back), and a good commit one-shot
          vs in gated waves (what the gates add per wave)
  upgrade a reboot-aware rolling upgrade on real Slurm (--upgrade-nodes, default 16): the stand-in driver pair
          550 -> 570 with `needs: reboot`, max_unavailable 4; per-wave time, reboot wait, total (bench/upgrade.py)
  packages what the package facts add to the no-op plan: `packages:` naming 10 installed packages or not, 16
          compute nodes (bench/package_facts.py; goal under 10%)

noop, drift, change, daemon and rollout need root and the testbed's Debian packages; the peers ansible-core
and pyinfra (pip install -e '.[bench]'); without them they are skipped with the reason. N above 64 uses the testbed's
light profile (`testbed up --light`) where this checkout has it. Writes bench.json, bench.md and bench.png to --out.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path
from typing import Any

from bench import daemon, hostile, nccl, package_facts, peers, reconcile, rollout, scale, upgrade
from bench.ansible_project import ansible_playbook
from bench.common import RESULTS, compile_bytecode, load_average, log, machine
from bench.report import targets, text_report, write
from bench.testbed import unavailable, use_subnets

SECTIONS = ("noop", "drift", "change", "scale", "nccl", "daemon", "rollout", "hostile", "packages", "upgrade")
DEFAULT_SECTIONS = ",".join(SECTIONS)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=DEFAULT_SECTIONS, help=f"comma-separated, of {', '.join(SECTIONS)}")
    p.add_argument("--nodes", default="4,16,64", help="compute node counts for noop/change (default 4,16,64)")
    p.add_argument("--rollout-nodes", default="16,64", help="compute node counts for rollout (default 16,64)")
    p.add_argument("--upgrade-nodes", default="16", help="compute node counts for upgrade (default 16)")
    p.add_argument("--runs", type=int, default=3, help="runs per figure, medians reported (default 3)")
    p.add_argument("--sizes", default="1000,10000", help="node counts for scale (default 1000,10000)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where bench.json/.md/.png go (default bench/results)")
    p.add_argument("--peers", default="all",
                   help="peers of noop and drift: all (default), none, or some of ansible,pyinfra,floor")
    p.add_argument("--ansible-forks", type=int, default=None,
                   help="change section: Ansible forks (default: as many as nodes, at most 64, like our ssh.forks)")
    p.add_argument("--ansible-pipelining", action="store_true", help="change section: turn Ansible's pipelining on")
    p.add_argument("--light", action="store_true",
                   help="noop/drift: the light testbed profile for every N (it has the ClusterShell gateway run; "
                        "above 64 nodes it is always light)")
    p.add_argument("--compare", type=Path, action="append", default=[], metavar="DIR",
                   help="noop: also run `reconciler plan` of the checkout DIR (e.g. `git worktree add /tmp/old "
                        "COMMIT`) on the same testbed, in the same rotation (before/after in one run); drift: also "
                        "that checkout's daemon drift check; repeatable")
    p.add_argument("--subnet", default=None, metavar="A.B.C",
                   help="the testbeds of noop, drift, change, daemon and packages take the /20 blocks from A.B.C on "
                        "(the third octet a multiple of 16), one each in turn; default: picked from the process id "
                        "(10.252.x, light 10.253.x)")
    p.add_argument("--no-plot", action="store_true", help="no PNG")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target of the issue is missed")
    return p


def _testbed_sections_unavailable() -> str | None:
    why = unavailable()
    if why is None and ansible_playbook() is None:
        why = "ansible-playbook not found (pip install -e '.[bench]')"
    return why


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chosen sections; return the results record."""
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"unknown section(s): {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    started = time.monotonic()
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "command": " ".join(["python -m bench", *args.argv]),
        "sections": sections,
        "runs": args.runs,
        "skipped": {},
    }
    chosen_peers = peers.parse_peers(args.peers)
    results["peers"] = chosen_peers
    if args.compare:
        results["compare"] = [str(tree) for tree in args.compare]
    with_peers = [s for s in ("noop", "drift") if s in sections]
    if with_peers:
        why = unavailable() or peers.peers_unavailable(chosen_peers)
        if why:
            results["skipped"].update(dict.fromkeys(with_peers, why))
        else:
            for key in with_peers:
                results[key] = []
            results["load"] = {}
            for index, computes in enumerate(_ints(args.nodes)):
                before = load_average()
                try:
                    measured_series = peers.measure(computes, 10 + index, args.runs, with_peers, chosen_peers,
                                                    light=args.light, compare=args.compare)
                except peers.NoLightProfile as exc:
                    log(f"noop/drift N={computes}: {exc}")
                    results["skipped"][f"noop/drift N={computes}"] = str(exc)
                    continue
                for series in measured_series:
                    results[series.section].extend(series.rows())
                    for tool, why in series.failed.items():
                        results["skipped"][f"{series.section} {tool} N={computes}"] = f"failed: {why}"
                results["load"][str(computes)] = {"before": before, "after": load_average()}
    on_testbed = [s for s in ("change",) if s in sections]
    if on_testbed:
        why = _testbed_sections_unavailable()
        if why:
            results["skipped"].update(dict.fromkeys(on_testbed, why))
        else:
            for key in on_testbed:
                results[key] = []
            for index, computes in enumerate(_ints(args.nodes)):
                measured = reconcile.measure(computes, index, args.runs, on_testbed, forks=args.ansible_forks,
                                             pipelining=args.ansible_pipelining)
                for item in measured:
                    results[item.section].append(item.row())
    if "daemon" in sections:
        try:
            results["daemon"] = daemon.run(_ints(args.nodes), args.runs)
        except daemon.NotBuilt as exc:
            results["skipped"]["daemon"] = str(exc)
    if "rollout" in sections:
        why = unavailable()
        if why:
            results["skipped"]["rollout"] = why
        else:
            results["rollout"] = rollout.run(_ints(args.rollout_nodes), args.runs, results["skipped"])
    if "scale" in sections:
        log(f"scale: {args.sizes} nodes")
        results["scale"] = scale.run(_ints(args.sizes), args.runs)
    if "nccl" in sections:
        results["nccl"] = nccl.run()
    if "hostile" in sections:
        results["hostile"] = hostile.run(max(args.runs, 3))
    if "packages" in sections:
        why = unavailable()
        if why:
            results["skipped"]["packages"] = why
        else:
            packages = package_facts.measure(16, max(args.runs, 5))
            results["packages"] = packages
            log(f"packages: no-op plan at 16 nodes {packages['without_median_s']:.2f} s without, "
                f"{packages['with_median_s']:.2f} s with `packages:` ({packages['ratio_median']:.3f}x, goal < "
                f"{package_facts.GOAL})")
    if "upgrade" in sections:
        why = unavailable()
        if why:
            results["skipped"]["upgrade"] = why
        else:
            results["upgrade"] = upgrade.run(_ints(args.upgrade_nodes), results["skipped"])
    results["elapsed_s"] = time.monotonic() - started
    return results


def main(argv: list[str] | None = None) -> int:
    """Run, print the tables, write the files; exit 1 on a missed target only with --strict."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    args.argv = argv
    if args.subnet:
        use_subnets(args.subnet)
    compile_bytecode()
    results = run(args)
    print(text_report(results), end="")
    for path in write(results, args.out, with_plot=not args.no_plot):
        log(f"wrote {path}")
    log(f"done in {results['elapsed_s']:.0f} s")
    missed = [sentence for sentence, held in targets(results) if not held]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
