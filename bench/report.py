"""Tables (text and markdown), the JSON record and the PNG plot of a benchmark run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.tables import Table

TARGET_PEER_N = (16, 64)  # issue 15: noop within 1.5x of the paramiko floor, >= 15x Ansible (best), < pyinfra
TARGET_FLOOR_RATIO = 1.5
TARGET_ANSIBLE_RATIO = 15.0
TARGET_DRIFT_N = 256  # issue 15: the drift check >= 3x faster than a cold plan at 256 nodes
TARGET_DRIFT_RATIO = 3.0
TARGET_SCALE_NODES = 10_000
TARGET_SCALE_S = 2.0
TARGET_FOLD_SHARE = 0.10


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 100 else f"{seconds:.0f} s"


def _runs(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def reconcile_table(key: str, rows: list[dict[str, Any]]) -> Table:
    """noop or change: our time, Ansible's, ratio, round trips per node."""
    ours, theirs = ("`reconciler plan`", "`ansible-playbook --check --diff`") if key == "noop" else (
        "`reconciler apply --yes`", "`ansible-playbook` + handler")
    title = ("No-op reconcile (nothing to change)" if key == "noop"
             else "One-line change applied (a partition's MaxTime; scontrol reconfigure)")
    table = Table(key, title, ["compute nodes (+ctl)", ours, theirs, "Ansible / ours",
                               "SSH round trips per node: ours", "Ansible", "runs, s: ours; Ansible"], [])
    for r in rows:
        lo, hi = r["ansible_trips_range"]
        olo, ohi = r["ours_trips_range"]
        table.rows.append([
            f"{r['computes']} (+1)", _s(r["ours_s"]), _s(r["ansible_s"]), f"{r['ratio']:.1f}x",
            f"{r['ours_trips_per_node']:.1f} ({olo}-{ohi})", f"{r['ansible_trips_per_node']:.1f} ({lo}-{hi})",
            f"{_runs(r['ours_runs_s'])}; {_runs(r['ansible_runs_s'])}",
        ])
    forks = sorted({r["ansible_forks"] for r in rows})
    table.notes.append("Medians; the ratio is the median of the per-pair ratios (the two tools run alternately).")
    table.notes.append(f"Ansible forks {', '.join(map(str, forks))} (one per node up to 64, as ours), no pipelining, "
                       "ControlPersist 60s, interpreter_python set (no discovery). Round trips per node: mean "
                       "(min-max over nodes); ctl has more work (exports, image, reconfigure).")
    return table


def _ratio(value: float) -> str:
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def peers_table(key: str, rows: list[dict[str, Any]], load: dict[str, Any] | None = None) -> Table:
    """noop or drift: every tool of the same run at each N, wall time, ratio to ours, client CPU per node."""
    title = ("No-op reconcile against peers (nothing to change, cold: no connection open)" if key == "noop" else
             "Steady-state drift check of the daemon (persistent sessions) against a cold plan and warm peers")
    table = Table(key, title, ["compute nodes (+ctl)", "tool", "wall (median)", "/ ours", "client CPU per node",
                               "runs, s", "detail"], [])
    for r in rows:
        detail = []
        if "trips_per_node" in r:
            detail.append(f"{r['trips_per_node']:.1f} SSH sessions/node")
        if "gather_s" in r:
            detail.append(f"gather {r['gather_s']:.2f} s, plan {r['plan_s'] * 1000:.0f} ms")
        if "first_cycle_s" in r:
            detail.append(f"first cycle (connecting) {r['first_cycle_s']:.2f} s")
        if "inner_s" in r:
            detail.append(f"connect..close {r['inner_s']:.2f} s (no interpreter start)")
        if "vs_floor" in r:
            detail.append(f"{r['vs_floor']:.2f}x the paramiko floor (runs {', '.join(map(str, r['vs_floor_runs']))})")
        if "gateways" in r:
            detail.append(f"{r['gateways']:.0f} gateways; {r['direct_round_trips']:.0f} nodes reached directly "
                          "(ctl, gateways), the rest through them")
        size = f"{r['computes']} (+1)" + (" light" if r.get("light") else "")
        table.rows.append([size, r["label"], _s(r["wall_s"]), "1" if r["tool"] == "ours" else _ratio(r["vs_ours"]),
                           f"{r['cpu_per_node_ms']:.1f} ms", _runs(r["wall_runs_s"]), "; ".join(detail) or "-"])
    table.notes.append("Medians; `/ ours` is the median of the per-run ratios (each run runs every tool once, in an "
                       "order rotating from run to run). Client CPU: user + system seconds on this machine of the "
                       "tool and its ssh/ProxyCommand children, divided by the nodes (ctl included).")
    if key == "noop":
        table.notes.append("Ansible best settings: pipelining on, forks = nodes, gathering = explicit, ControlPersist "
                           "(masters closed before every run). pyinfra: `--dry` (change detection, nothing executed), "
                           "--parallel = nodes. Floors: forks = nodes; paramiko in a fresh Python process.")
    else:
        table.notes.append("ours: one `cycle()` of the daemon's loop (reconciler/daemon/loop.py; report mode, "
                           "Sessions kept open: no new connection, checked) timed in its process; Ansible: the "
                           "best-settings check with its ControlPersist masters open from the previous run; floors "
                           "over connections opened before.")
    for n, when in sorted((load or {}).items(), key=lambda kv: int(kv[0])):
        if any(str(r["computes"]) == n for r in rows):
            table.notes.append(f"Load average (1, 5, 15 min) at N={n}: before {when['before']}, after {when['after']}.")
    return table


def scale_table(rows: list[dict[str, Any]]) -> Table:
    """Render + diff at scale: plan times and memory."""
    table = Table("scale", "Render and diff at scale (pure CPU, no SSH)",
                  ["nodes", "load + validate", "plan: few nodes drifted", "plan: one line changed on every node",
                   "fold by node set (share of that plan)", "render folded text + Markdown",
                   "plan peak (tracemalloc)", "process max RSS", "drift found"], [])
    for r in rows:
        table.rows.append([
            f"{r['nodes']:,}", f"{r['load_s'] * 1000:.0f} ms", f"{r['plan_s'] * 1000:.0f} ms",
            f"{r['change_plan_s'] * 1000:.0f} ms",
            f"{r['fold_s'] * 1000:.0f} ms ({r['fold_share'] * 100:.1f}%)", f"{r['render_folded_s'] * 1000:.0f} ms",
            f"{r['plan_peak_mib']:.0f} MiB",
            f"{r['process_maxrss_mib']:.0f} MiB", f"{r['changes']} of {r['resources']:,} resources",
        ])
    table.notes.append("plan = make_plan with every driver against facts synthesised from the rendered files "
                       "(it renders every node's files and compares them); medians. fold = fold_changes on the plan of "
                         "the one-line change (one entry, every node), as a share of that plan's time.")
    return table


def nccl_table(data: dict[str, Any]) -> Table:
    """GPU-seconds to a verdict: real nccl-tests runs per setting against the full sweep; the 8-GPU rows."""
    table = Table("nccl", "NCCL check cost: GPU-seconds to a verdict",
                  ["recording", "setting", "validation", "GPUs", "sizes", "wall (median; runs)", "GPU-seconds",
                   "share of full sweep", "verdict busbw (>= 1 GiB)", "vs sweep peak", "verdict"], [])
    for r in data["measured"]:
        setting = f"{r['config']}: {r['args']}" + (" **(check default)**" if r["check_default"] else "")
        share = f"{r['share']:.2f}" + (" (meets)" if r.get("meets") else "") if "share" in r else "-"
        versus = f"{r['busbw_vs_peak_pct']:+.1f} % of {r['peak']:.1f}" if r["config"] == "full" else (
            f"{r['busbw_vs_peak_pct']:+.1f} %" if "busbw_vs_peak_pct" in r and r["busbw"] else "-")
        table.rows.append([
            r["source"], setting, "-c 1" if r["validation"] else "-c 0", str(r["gpus"]), str(r["sizes"]),
            f"{r['wall_s']:.2f} s ({_runs(r['wall_runs_s'])})", f"{r['gpu_s']:.2f}", share, f"{r['busbw']:.1f} GB/s",
            versus, ", ".join(r["verdicts"]),
        ])
    for r in data["eight_gpu_model"]:
        table.rows.append([r["source"], r["sweep"], "-c 1", str(r["gpus"]), str(r["sizes"]), "-",
                           f"{r['collective_gpu_s']:.1f} in collectives", "-", "-", f"peak {r['peak']:.1f}", "-"])
    if data.get("default_shares"):
        shares = ", ".join(f"{s:.3f}" for s in data["default_shares"])
        drops = ", ".join(f"{d:+.1f} %" for d in data["default_busbw_vs_peak_pct"])
        table.notes.append(f"Check default ({data['default_args']}): {shares} of the full sweep's GPU-seconds, "
                           f"busbw {drops} against its peak: target (<= 0.25, within 5 %) "
                           f"{'met' if data['default_meets'] else 'MISSED'} in every recording.")
    table.notes.append("GPU-seconds = GPUs x the wall time the check's launcher measured around the process; "
                       "share = GPU-seconds / the same recording's full sweep (-b 8 -e 8G -f 2); verdict busbw = "
                       "the value the check records (mean over rows >= 1 GiB, lower of out-of-place and in-place); "
                       "sweep peak = the full sweep's best row; medians over the runs.")
    return table


def rollout_tables(rows: list[dict[str, Any]]) -> list[Table]:
    """rollout: the bad commit's rollback, and the good commit one-shot against gated waves (bench/rollout.py)."""
    from bench.rollout import TARGET_GATE_N, TARGET_GATE_S, TARGET_ROLLBACK_S

    def ok(held: bool) -> str:
        return "met" if held else "MISSED"

    back = Table("rollout-rollback", "Progressive rollout: a bad commit (prolog exits 1) rolled back",
                 ["compute nodes (+ctl)", "push -> gate failed", "gate failed -> rollback complete",
                  f"target <= {TARGET_ROLLBACK_S:.0f} s", "rollback (apply + resume)", "push -> rolled back",
                  "push -> seen in status", "push -> every prolog read back", "every node old", "runs, s"], [])
    for r in (r for r in rows if r["scenario"] == "rollback"):
        back.rows.append([
            f"{r['computes']} (+1)", _s(r["push_to_gate_failed_s"]), _s(r["gate_failed_to_rollback_s"]),
            ok(r["max_gate_failed_to_rollback_s"] <= TARGET_ROLLBACK_S), _s(r["rollback_s"]),
            _s(r["push_to_rolled_back_s"]), _s(r["push_to_status_s"]), _s(r["push_to_verified_s"]),
            f"{'yes' if r['all_nodes_old'] else 'NO'} ({r['nodes_checked']} nodes)",
            _runs(r["gate_failed_to_rollback_runs_s"])])
    back.notes.append("Medians. The gate that failed: smoke-job on the canary (Slurm drains it: Prolog error); the "
                      "rollback puts the canary's prolog back and resumes it. Times from the daemon's rollout record "
                      "(the failed wave's end, the rollback's started/ended) against the push's return; `seen in "
                      "status`: when a `reconciler status --format json` poll (every 0.5 s) first listed it; "
                      "`read back`: when every compute node's /etc/slurm/prolog.sh had been read (nsenter) "
                      "and compared with its content before the push. runs: gate failed -> rollback complete.")
    good = Table("rollout-waves", "Progressive rollout: what gated waves add to a good commit (push -> applied)",
                 ["compute nodes (+ctl)", "one shot (waves: all)", "progressive (canary, 50%, 100%)",
                  "added", "waves", "added per wave", f"target <= {TARGET_GATE_S:.0f} s at {TARGET_GATE_N}",
                  "gate s per wave (smoke job)", "wave s per wave", "runs, s: one shot; progressive"], [])
    for r in (r for r in rows if r["scenario"] == "good"):
        target = "-" if r["computes"] != TARGET_GATE_N else ok(
            r["added_per_wave_s"] <= TARGET_GATE_S and r["max_gate_s"] <= TARGET_GATE_S)
        good.rows.append([
            f"{r['computes']} (+1)", _s(r["one_shot_s"]), _s(r["progressive_s"]), _s(r["added_s"]), str(r["waves"]),
            _s(r["added_per_wave_s"]), target, ", ".join(f"{v:.2f}" for v in r["gate_s_per_wave"]),
            ", ".join(f"{v:.2f}" for v in r["wave_s_per_wave"]),
            f"{_runs(r['one_shot_runs_s'])}; {_runs(r['progressive_runs_s'])}"])
    shown = [r for r in rows if r["scenario"] == "good"]
    if shown:
        r = shown[0]
        good.notes.append("The same change each time: one managed file on every compute node gets new content (files."
                          "yaml), the rollout mode in the same commit. Medians; added = median of the per-run "
                          "differences (the two modes alternate which goes first); push -> applied = the end of "
                          "the daemon's run that applied it (`reconciler history`), from the push's return. Gates: "
                          "the smoke job (a Slurm job on exactly the wave's nodes through a reservation, then the "
                          "wait until Slurm ended it and recorded its drains); NCCL gate off, no node checks "
                          "declared.")
        good.notes.append(f"Soak: {r['soak_s']} s as configured here, so the figure is the gates' cost; a soak "
                          f"waits after every gated wave but the last: the default {r['default_soak_s']} s would "
                          f"add {r['default_soak_adds_s']} s to these {r['waves']} waves.")
    return [t for t in (back, good) if t.rows]


def tables(results: dict[str, Any]) -> list[Table]:
    """Every table the results hold, in section order."""
    out = []
    for key in ("noop", "drift"):
        if results.get(key):
            out.append(peers_table(key, results[key], results.get("load")))
    if results.get("change"):
        out.append(reconcile_table("change", results["change"]))
    if results.get("daemon"):  # issue 8 item 3 (bench/daemon.py): its table goes here
        rows = results["daemon"]
        out.append(Table("daemon", "Commit-to-applied latency of the daemon", list(rows[0]),
                         [[str(v) for v in row.values()] for row in rows]))
    if results.get("rollout"):
        out.extend(rollout_tables(results["rollout"]))
    if results.get("scale"):
        out.append(scale_table(results["scale"]))
    if results.get("nccl"):
        out.append(nccl_table(results["nccl"]))
    if results.get("hostile"):
        from bench.hostile import table as hostile_table

        out.append(hostile_table(results["hostile"]))
    if results.get("upgrade"):
        from bench.upgrade import table as upgrade_table

        out.append(upgrade_table(results["upgrade"]))
    return out


def targets(results: dict[str, Any]) -> list[tuple[str, bool]]:
    """The issue's two musts, where this run measured them: (sentence, held)."""
    found = []
    by_tool = {(r["section"], r["computes"], r["tool"]): r for key in ("noop", "drift") for r in results.get(key) or []}
    for (section, n, tool), row in sorted(by_tool.items()):
        if section == "noop" and n in TARGET_PEER_N and tool == "floor-paramiko":
            found.append((f"no-op plan at N={n}: {1 / row['vs_ours']:.2f}x the paramiko floor's time "
                          f"(target <= {TARGET_FLOOR_RATIO}x)", 1 / row["vs_ours"] <= TARGET_FLOOR_RATIO))
        if section == "noop" and n in TARGET_PEER_N and tool == "ansible":
            found.append((f"no-op plan at N={n}: {row['vs_ours']:.1f}x faster than Ansible with its best settings "
                          f"(target >= {TARGET_ANSIBLE_RATIO:.0f}x)", row["vs_ours"] >= TARGET_ANSIBLE_RATIO))
        if section == "noop" and n in TARGET_PEER_N and tool == "pyinfra":
            found.append((f"no-op plan at N={n}: {row['vs_ours']:.1f}x faster than pyinfra --dry (target > 1x)",
                          row["vs_ours"] > 1))
        if section == "drift" and n >= TARGET_DRIFT_N and tool == "plan":
            found.append((f"drift check at N={n}: {row['vs_ours']:.1f}x faster than a cold plan "
                          f"(target >= {TARGET_DRIFT_RATIO:.0f}x)", row["vs_ours"] >= TARGET_DRIFT_RATIO))
    if results.get("rollout"):
        from bench.rollout import targets as rollout_targets

        found.extend(rollout_targets(results["rollout"]))
    if results.get("hostile"):
        from bench.hostile import targets as hostile_targets

        found.extend(hostile_targets(results["hostile"]))
    if results.get("upgrade"):
        from bench.upgrade import targets as upgrade_targets

        found.extend(upgrade_targets(results["upgrade"]))
    for row in results.get("scale") or []:
        if row["nodes"] >= TARGET_SCALE_NODES:
            sentence = f"{row['nodes']:,}-node render + diff: {row['plan_s']:.2f} s (target < {TARGET_SCALE_S:.0f} s)"
            found.append((sentence, row["plan_s"] < TARGET_SCALE_S))
            if "fold_share" in row:
                found.append((f"{row['nodes']:,}-node fold by node set: {row['fold_s'] * 1000:.0f} ms, "
                               f"{row['fold_share'] * 100:.1f}% of plan time (target < {TARGET_FOLD_SHARE:.0%})",
                               row["fold_share"] < TARGET_FOLD_SHARE))
    return found


def text_report(results: dict[str, Any]) -> str:
    """Everything for the terminal."""
    parts = [f"{t.text()}\n" for t in tables(results)]
    for section, why in (results.get("skipped") or {}).items():
        parts.append(f"[{section}] skipped: {why}\n")
    for sentence, held in targets(results):
        parts.append(f"[{'ok' if held else 'MISSED'}] {sentence}\n")
    return "".join(parts)


def markdown_report(results: dict[str, Any], plot_name: str | None) -> str:
    """The markdown file: header line, tables, targets, plot."""
    out = [f"Run {results['date']} on {results['machine']} (`{results['command']}`, "
           f"{results['elapsed_s'] / 60:.1f} min).\n"]
    out += [t.markdown() for t in tables(results)]
    for section, why in (results.get("skipped") or {}).items():
        out.append(f"- {section}: skipped ({why})\n")
    marks = targets(results)
    if marks:
        out.append("Targets:\n\n" + "".join(f"- {'met' if held else 'MISSED'}: {s}\n" for s, held in marks))
    if plot_name:
        out.append(f"![benchmark plot]({plot_name})\n")
    return "\n".join(out)


def _node_axes(ax: Any, nodes: list[int], title: str) -> None:
    """Log-log axes of wall time against compute nodes, one tick per node count measured."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(nodes, [str(v) for v in nodes])
    ax.set_xlabel("compute nodes (+ ctl)")
    ax.set_ylabel("wall time (s)")
    ax.set_title(title)


def plot(results: dict[str, Any], path: Path) -> Path | None:
    """A PNG with one panel per measured section; None when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [k for k in ("noop", "drift", "change", "scale", "nccl") if results.get(k)]
    if not panels:
        return None
    cols = min(2, len(panels))
    rows_n = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.5 * cols, 4.2 * rows_n), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, panels, strict=False):
        if key in ("noop", "drift"):
            rows = results[key]
            for tool in dict.fromkeys(r["tool"] for r in rows):
                mine = [r for r in rows if r["tool"] == tool]
                ax.plot([r["computes"] for r in mine], [r["wall_s"] for r in mine], "o-", label=mine[0]["label"])
            _node_axes(ax, sorted({r["computes"] for r in rows}),
                       "no-op: cold, against peers" if key == "noop" else "drift check: warm")
            ax.legend(fontsize=6)
        elif key == "change":
            rows = results[key]
            n = [r["computes"] for r in rows]
            ax.plot(n, [r["ours_s"] for r in rows], "o-", label="reconciler")
            ax.plot(n, [r["ansible_s"] for r in rows], "s-", label="ansible-playbook")
            for r in rows:
                ax.annotate(f"{r['ratio']:.1f}x", (r["computes"], r["ansible_s"]), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize=8)
            _node_axes(ax, n, "one-line change applied")
            ax.legend()
        elif key == "scale":
            rows = results["scale"]
            n = [r["nodes"] for r in rows]
            ax.plot(n, [r["plan_s"] for r in rows], "o-", label="few drifted")
            ax.plot(n, [r["change_plan_s"] for r in rows], "s-", label="one line changed everywhere")
            ax.axhline(TARGET_SCALE_S, color="grey", linestyle="--", label=f"{TARGET_SCALE_S:.0f} s target")
            ax.set_xscale("log")
            ax.set_xlabel("nodes")
            ax.set_ylabel("plan (render + diff), s")
            ax.set_title("render and diff at scale")
            ax.legend()
        else:
            data = results["nccl"]
            first = data["measured"][0]["source"] if data["measured"] else ""
            shown = [r for r in data["measured"] if r["source"] == first]
            labels = [r["config"] + (" *" if r["check_default"] else "") for r in shown]
            ax.bar(labels, [r["gpu_s"] for r in shown], label="process (wall x GPUs)")
            ax.bar(labels, [r["collective_gpu_s"] for r in shown], label="in collectives")
            if shown and "share" in shown[0]:
                full = next(r["gpu_s"] for r in shown if r["config"] == "full")
                ax.axhline(full / 4, color="grey", linestyle="--", label="a quarter of the full sweep")
            ax.tick_params(axis="x", labelrotation=60, labelsize=7)
            ax.set_ylabel(f"GPU-seconds to a verdict ({first.split(' ')[0]})")
            ax.set_title("NCCL check cost")
            ax.legend()
    fig.suptitle(f"reconciler benchmarks, {results['date']} ({results['machine']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(results: dict[str, Any], out_dir: Path, *, with_plot: bool = True) -> list[Path]:
    """Write bench.json, bench.md and (optionally) bench.png into out_dir; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    png = plot(results, out_dir / "bench.png") if with_plot else None
    if png:
        written.append(png)
    md = out_dir / "bench.md"
    md.write_text(markdown_report(results, png.name if png else None))
    data = out_dir / "bench.json"
    data.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return [data, md, *written]
