"""Render and diff at scale: plan a 1,000- or 10,000-node desired state against synthesised facts.

Pure CPU, no SSH. The desired state is bench/render_scale.py's (4 node sets, 5 partitions, gres, cgroup,
NFS exports and mounts) plus a managed prolog on every GPU node and an enroot image. Facts are
synthesised from the rendered files, as a converged cluster would report them, then a few nodes are made
to drift (hand-edited slurm.conf, a foreign fstab line, a missing mount, a node drained by us). The timed
step is `make_plan` with every driver: it renders each node's files and compares them with its facts.
The plan of a one-line change on every node is then folded by node set (`fold_changes`, timed against
that plan's own time) and rendered folded as text and Markdown.

Each size is measured in a fresh subprocess (`python -m bench.scale --worker N`), so that its peak RSS
(`ru_maxrss`) belongs to that size alone; tracemalloc's peak of the planning step is taken in a separate,
untimed pass (tracemalloc slows Python down several times).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.common import median, python_env
from bench.render_scale import write_desired_state
from reconciler.common import hostlist
from reconciler.desired.inventory import node_specs, slurm_nodes
from reconciler.desired.loader import LoadedState, load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.converged import converged_facts, file_fact
from reconciler.engine.context import Context
from reconciler.engine.fold import fold_changes
from reconciler.engine.plan import Plan
from reconciler.engine.planner import make_plan
from reconciler.engine.report import render_markdown, render_text
from reconciler.facts.models import SlurmNodeFact
from reconciler.render.files import file_path

BUDGET_S = 2.0
SOURCE = "scale @ 0123456789ab"
PROLOG = "#!/bin/sh\n# Slurm prolog (managed by the reconciler)\nexit 0\n"
EXTRA_YAML = """\
patches:
  - name: prolog
    path: /etc/slurm/prolog.sh
    nodes: "{nodes}"
    mode: "0755"
    content: |
      #!/bin/sh
      # Slurm prolog (managed by the reconciler)
      exit 0
images:
  - uri: "docker://nvcr.io#nvidia/pytorch:24.04-py3"
    path: /shared/images/pytorch-24.04.sqsh
    import_on: login01
"""
# (what drifts, how many nodes): each is a change the plan must find
DRIFT = {"slurm.conf": 3, "fstab": 2, "mount": 2, "drain": 1}


def write_state(root: Path, nodes: int) -> None:
    """The render benchmark's desired state plus a managed prolog on every GPU node and an image."""
    write_desired_state(root, nodes)
    width = max(5, len(str(nodes)))
    everyone = f"gpu[{1:0{width}d}-{nodes:0{width}d}]"
    (root / "extras.yaml").write_text(EXTRA_YAML.format(nodes=everyone))


def drift(ctx: Context) -> set[tuple[str, str]]:
    """Make a few nodes drift; return the (node, resource) changes a correct plan must show."""
    state, facts = ctx.state, ctx.facts
    gpus = slurm_nodes(state)
    step = max(1, len(gpus) // 10)
    picks = iter(gpus[::step])
    expected: set[tuple[str, str]] = set()
    conf = file_path(state, "slurm.conf")
    for _ in range(DRIFT["slurm.conf"]):
        node = next(picks)
        text = facts.nodes[node].files[conf].content or ""
        facts.nodes[node].files[conf] = file_fact(text.replace("MaxTime=UNLIMITED", "MaxTime=1-00:00:00", 1))
        expected.add((node, conf))
    for _ in range(DRIFT["fstab"]):
        node = next(picks)
        text = facts.nodes[node].files["/etc/fstab"].content or ""
        facts.nodes[node].files["/etc/fstab"] = file_fact(text.replace(" 0 0\n", " 0 1\n", 1))
        expected.add((node, "/etc/fstab"))
    for _ in range(DRIFT["mount"]):
        node = next(picks)
        facts.nodes[node].mounts = [m for m in facts.nodes[node].mounts if m.mountpoint != "/shared"]
        expected.add((node, "mount /shared"))
    for _ in range(DRIFT["drain"]):
        node = next(picks)
        facts.slurm_nodes[node] = SlurmNodeFact(name=node, state="IDLE+DRAIN", reason="reconciler: rolling restart")
        expected.add((node, "slurm node state"))
    return expected


def check(plan: Plan, expected: set[tuple[str, str]]) -> None:
    """The plan must show exactly the drift and a reconfigure for the edited slurm.conf."""
    found = {(c.node, c.resource) for c in plan.changing()}
    reconfigure = _reconfigures(plan)
    if found != expected or not reconfigure:
        raise AssertionError(f"plan does not match the drift: missing {sorted(expected - found)[:5]}, "
                             f"unexpected {sorted(found - expected)[:5]}, reconfigure={reconfigure}")


def _reconfigures(plan: Plan) -> bool:
    """The plan's only follow-up is `scontrol reconfigure` (no restart)."""
    return [(f.kind, f.target) for f in plan.followups] == [("command", "scontrol reconfigure")]


def _context(loaded: LoadedState, change: bool) -> tuple[Context, set[tuple[str, str]] | None]:
    """A fresh context (cold caches) with facts: a few nodes drifted, or a one-line change in Git."""
    state = loaded.state.model_copy(deep=True)
    ctx = Context(loaded=dataclasses.replace(loaded, state=state), source=SOURCE)
    ctx.facts = converged_facts(ctx)
    if change:
        state.cluster.partitions[1].max_time = "3-00:00:00"  # one line of slurm.conf, on every node
        return ctx, None
    return ctx, drift(ctx)


def _plan(ctx: Context) -> tuple[float, Plan]:
    hostlist.clear_cache()
    start = time.perf_counter()
    plan = make_plan(ctx, all_drivers())
    return time.perf_counter() - start, plan


def _fold(plan: Plan) -> tuple[float, float]:
    """Seconds to fold the plan's changes by node set, and to render it folded as text and Markdown."""
    start = time.perf_counter()
    entries = fold_changes(c for c in plan.changes if c.action != "ok")
    seconds = time.perf_counter() - start
    if len(entries) != 1 or entries[0].count != len(plan.nodes_changing()):
        raise AssertionError(f"one slurm.conf line on every node must fold into one entry, not {len(entries)}")
    start = time.perf_counter()
    text, markdown = render_text(plan), render_markdown(plan)
    rendered = time.perf_counter() - start
    if len(markdown) >= 4_000 or len(text.splitlines()) >= 40:
        raise AssertionError(f"folded plan too long: {len(markdown)} Markdown chars, {len(text.splitlines())} lines")
    return seconds, rendered


def measure(nodes: int, runs: int) -> dict[str, Any]:
    """Time load, facts synthesis and planning for one size in this process; peak memory too."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_state(root, nodes)
        loads = []
        for _ in range(runs):
            hostlist.clear_cache()
            start = time.perf_counter()
            loaded = load_dir(root)
            loads.append(time.perf_counter() - start)
    synth, drifts, changes, folds, renders = [], [], [], [], []
    for _ in range(runs):
        hostlist.clear_cache()
        start = time.perf_counter()
        ctx, expected = _context(loaded, change=False)
        synth.append(time.perf_counter() - start)
        seconds, plan = _plan(ctx)
        drifts.append(seconds)
        check(plan, expected or set())
        ctx, _ = _context(loaded, change=True)
        seconds, changed = _plan(ctx)
        changes.append(seconds)
        conf = file_path(ctx.state, "slurm.conf")
        if {c.resource for c in changed.changing()} != {conf} or not _reconfigures(changed):
            raise AssertionError("a MaxTime change must update slurm.conf everywhere and only reconfigure")
        seconds, rendered = _fold(changed)
        folds.append(seconds)
        renders.append(rendered)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ctx, _ = _context(loaded, change=False)
    hostlist.clear_cache()
    tracemalloc.start()
    make_plan(ctx, all_drivers())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "nodes": len(node_specs(loaded.state)),
        "runs": runs,
        "load_s": median(loads),
        "facts_s": median(synth),
        "plan_s": median(drifts),
        "plan_runs_s": drifts,
        "changes": len(plan.changing()),
        "resources": len(plan.changes),
        "change_plan_s": median(changes),
        "change_plan_runs_s": changes,
        "changed_nodes": len(changed.nodes_changing()),
        "fold_s": median(folds),
        "fold_runs_s": folds,
        "fold_share": median(folds) / median(changes),
        "render_folded_s": median(renders),
        "plan_peak_mib": peak / 2**20,
        "process_maxrss_mib": rss_mib,
    }


def run(sizes: list[int], runs: int) -> list[dict[str, Any]]:
    """Measure every size, each in its own subprocess; one row per size."""
    rows = []
    for size in sizes:
        proc = subprocess.run([sys.executable, "-m", "bench.scale", "--worker", str(size), "--runs", str(runs)],
                              capture_output=True, text=True, env=python_env(), timeout=1800, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"scale worker for {size} nodes failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rows


def main(argv: list[str] | None = None) -> int:
    """`--worker N`: measure one size and print one JSON line (used by `run`)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", type=int, required=True, help="node count to measure")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.worker, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
