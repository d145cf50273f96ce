"""Print the PR comment of a one-line slurm.conf change on a 1,024-node cluster (docs/daemon.md's folded example).

`python -m bench.fold_example [--nodes N] [--format pr|text]`. Pure CPU, no SSH: the scale benchmark's
desired state (bench/scale.py) as "main", facts synthesised from it as a converged cluster would report them,
two nodes whose slurm.conf was edited by hand, running jobs on a few nodes, and a PR that changes SlurmdPort
(a change that restarts slurmd everywhere). Planned and rendered by the same code the daemon runs for PRs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from bench.scale import write_state
from reconciler.desired.loader import load_dir
from reconciler.desired.source import describe_source
from reconciler.drivers import all_drivers
from reconciler.drivers.converged import converged_facts, file_fact
from reconciler.engine.context import Context
from reconciler.engine.report import render_text
from reconciler.facts.models import JobFact
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_planning import PrPlan, plan_main, plan_pull_request

MAIN_SHA = "5d0c7a81e2f4b6c8d0e2f4a6b8c0d2e4f6a8b0c2"
PR_SHA = "9e41b27c5a3f1d0e8c6b4a29f7e5d3c1b9a7f5e3"
CONF = "/etc/slurm/slurm.conf"


def example(nodes: int, fmt: str) -> str:
    """The PR comment (or the folded text plan) of the example."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "desired-state"
        root.mkdir()
        write_state(root, nodes)
        base = load_dir(root, commit=MAIN_SHA)
    drivers = all_drivers()
    facts = converged_facts(Context(loaded=base, source=describe_source(base.root, base.commit)))
    width = max(5, len(str(nodes)))
    gpu = [f"gpu{i:0{width}d}" for i in range(1, nodes + 1)]
    for node, (old, new) in {gpu[16]: ("SchedulerType=sched/backfill", "SchedulerType=sched/builtin"),
                             gpu[nodes // 2 - 1]: ("HealthCheckInterval=300", "HealthCheckInterval=60")}.items():
        facts.nodes[node].files[CONF] = file_fact((facts.nodes[node].files[CONF].content or "").replace(old, new))
    facts.jobs = [JobFact(job_id=str(4200 + i), state="RUNNING", nodes=[gpu[i * 37 + 2]]) for i in range(5)]
    _, main_plan = plan_main(base, facts, drivers)
    state = base.state.model_copy(deep=True)
    state.cluster.slurm_conf.SlurmdPort = 6900
    pr = dataclasses.replace(base, state=state, commit=PR_SHA)
    plan = plan_pull_request(pr, facts, main_plan, drivers, f"desired-state @ {PR_SHA[:12]}")
    if fmt == "text":
        return render_text(plan)
    report = PrPlan(number=42, head_sha=PR_SHA, head_ref="slurmd-port", subdir="desired-state", status="ok",
                    main_plan=main_plan, plan=plan, base_commit=MAIN_SHA, fetch_ref="refs/pull/42/head")
    return render_pr_comment(report)


def main(argv: list[str] | None = None) -> int:
    """Print the example."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--format", choices=["pr", "text"], default="pr")
    args = parser.parse_args(argv)
    sys.stdout.write(example(args.nodes, args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
