"""Render a plan as text (coloured diffs on a terminal), JSON or Markdown."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from reconciler.engine.fold import (
    SET_CAP,
    FoldedChange,
    by_nodeset,
    cap_nodeset,
    fold_changes,
    fold_mentions,
    fold_names,
    fold_reasons_by_node,
    nodes_phrase,
    summary_line,
)
from reconciler.engine.plan import CHANGING, NEEDS_TEXT, Change, Plan

COLOURS = {"+": "\033[32m", "-": "\033[31m", "@": "\033[36m"}
RESET = "\033[0m"
SYMBOLS = {"create": "+", "update": "~", "delete": "-", "unknown": "?", "error": "!", "ok": " "}
MARKDOWN_LIMIT = 65_536
MARKER = "<!-- reconciler:plan -->"
# An `ok` change a driver adds on a node whose reboot or driver reload waits for running jobs (its summary says so).
BUSY_RESOURCE = "running jobs"
SUMMARY_CAP = 300  # characters of one change summary in the reboot line
ORCHESTRATED = {"reboot": "Upgrades with reboots", "driver-reload": "Upgrades with driver reloads"}


def _colour_diff(diff: str, colour: bool) -> str:
    if not colour:
        return diff
    out = []
    for line in diff.splitlines():
        code = COLOURS.get(line[:1]) if not line.startswith(("+++", "---")) else "\033[1m"
        out.append(f"{code}{line}{RESET}" if code else line)
    return "\n".join(out) + "\n"


def _by_node(changes: list[Change]) -> dict[str, list[Change]]:
    grouped: dict[str, list[Change]] = defaultdict(list)
    for change in changes:
        grouped[change.node].append(change)
    return dict(sorted(grouped.items()))


def _shown(plan: Plan) -> list[Change]:
    return [c for c in plan.changes if c.action != "ok"]


def _heading(nodeset: str, entries: list[FoldedChange]) -> str:
    """`gpu01` or `gpu[0001-1024] (1,024 nodes)`, the set capped in length."""
    return nodes_phrase(entries[0].nodes, SET_CAP, nodeset)


def _followups_text(plan: Plan) -> list[str]:
    lines = []
    consequences = plan.consequences()
    if consequences:
        lines.append("\nThen:")
        lines += [f"  - {text}" for text in consequences]
        lines += [f"    ({reason})" for reason in plan.consequence_reasons()]
    if plan.rollout and plan.rollout.get("lines") and plan.has_changes:
        lines.append("\nRollout:")
        lines += [f"  - {text}" for text in plan.rollout["lines"]]
        lines += _windows_text(plan.rollout.get("windows"), any(c.needs for c in plan.changing()))
    return lines


def _windows_text(windows: dict[str, Any] | None, needs: bool) -> list[str]:
    """The maintenance windows (PLAN.rollout["windows"], set by the rollout layer), and what waits for one now:
    only what they hold (a plan without reboots is not held by windows that hold only reboots)."""
    if not windows:
        return []
    line = f"  - maintenance windows ({windows['windows']}): {windows['text']}"
    held = windows["holds"] == "every apply" or needs
    if not windows["open"] and held:
        what = "this commit" if windows["holds"] == "every apply" else "the reboots and driver reloads"
        line += f"; {what} wait for it"
    return [line]


def _orchestrated_words(upgrade: dict[str, Any]) -> str:
    """How rollout.upgrade takes such changes out (PLAN.rollout["upgrade"], set by the rollout layer)."""
    gates = [str(g) for g in upgrade.get("gates") or []]
    now = upgrade.get("now")
    limit = upgrade.get("max_unavailable", 1)
    at_once = (f"{now['count']} at a time now ({now['why']})" if isinstance(now, dict)
               else f"at most {limit} unavailable at a time")
    taken = ("; a busy node is reserved from when its jobs are expected to end (mode reservation), its free GPUs "
             "taking jobs until then" if upgrade.get("mode") == "reservation" else "")
    requeue = [str(p) for p in upgrade.get("requeue") or []]
    taken += f"; jobs of partition {', '.join(requeue)} are requeued, not waited for" if requeue else ""
    return (f"node by node, {at_once}, " + (f"gated by {', '.join(gates)}" if gates else "no gates") + taken
            + " (rollout.upgrade)")


def _needs_text(plan: Plan) -> list[str]:
    """The changes that take effect only after a reboot or driver reload: `apply` holds them unless allowed, or
    with rollout.upgrade how they go out; then how many nodes that reboots (or reloads), how many wait for running
    jobs, and the versions (the summaries)."""
    needing: dict[str, set[str]] = {}
    moves: dict[str, list[str]] = {}
    for change in plan.changing():
        if change.needs:
            needing.setdefault(change.needs, set()).add(change.node)
            text = change.summary.removesuffix(f" ({NEEDS_TEXT[change.needs]})")
            if text and text not in moves.setdefault(change.needs, []):
                moves[change.needs].append(text)
    busy = {c.node for c in plan.changes if c.resource == BUSY_RESOURCE and c.action == "ok"}
    upgrade = (plan.rollout or {}).get("upgrade")
    lines = []
    for needs, nodes in needing.items():
        if upgrade:  # rollout.upgrade: orchestrated, not held
            lines.append(f"\n{ORCHESTRATED[needs]} on {fold_names(nodes)}: {_orchestrated_words(upgrade)}")
        else:
            lines.append(f"\n{NEEDS_TEXT[needs].capitalize()} on {fold_names(nodes)}: `apply` holds these changes "
                         f"unless given --allow {needs}")
        verb = "reboots" if needs == "reboot" else "reloads the driver on"
        words = f"{verb} {len(nodes):,} node{'s' if len(nodes) != 1 else ''}"
        if waiting := sorted(nodes & busy):
            words += (f"; {len(waiting):,} wait{'s' if len(waiting) == 1 else ''} for running jobs "
                      f"({fold_names(waiting, SET_CAP)})")
        shown = [text if len(text) <= SUMMARY_CAP else text[:SUMMARY_CAP] + "…" for text in moves.get(needs, [])]
        if shown:
            words += ": " + "; ".join(shown[:3]) + (f"; and {len(shown) - 3} more" if len(shown) > 3 else "")
        lines.append(f"  {words}")
    return lines


def render_text(plan: Plan, colour: bool = False, show_diffs: bool = True, per_node: bool = False) -> str:
    """Human-readable plan: identical changes folded under their node set, each diff once; then consequences.

    PER_NODE: today's unfolded view instead, every node with each of its changes and its own diff.
    """
    lines = [f"Plan for {plan.source}"]
    if per_node:
        for node, changes in _by_node(_shown(plan)).items():
            lines.append(f"\n{node}:")
            for change in changes:
                lines.append(f"  {SYMBOLS[change.action]} [{change.driver}] {change.summary or change.resource}")
                if show_diffs and change.diff:
                    lines.append(_colour_diff(change.diff, colour).rstrip("\n"))
    else:
        entries = fold_changes(_shown(plan))
        for nodeset, items in by_nodeset(entries).items():
            lines.append(f"\n{_heading(nodeset, items)}:")
            for entry in items:
                lines.append(f"  {SYMBOLS[entry.action]} [{entry.driver}] {entry.summary or entry.resource}")
                if show_diffs and entry.diff:
                    lines.append(_colour_diff(entry.diff, colour).rstrip("\n"))
        changing = [e for e in entries if e.action in CHANGING]
        if changing:
            lines.append(f"\nSummary: {summary_line(changing)}")
    lines += _followups_text(plan)
    lines += _needs_text(plan)
    for warning in plan.warnings:
        lines.append(f"\nwarning: {warning}")
    for error in plan.errors if per_node else fold_mentions(plan.errors, {c.node for c in plan.changes}):
        lines.append(f"\nerror: {error}")
    lines.append(f"\n{plan.verdict()}")
    return "\n".join(lines) + "\n"


def render_json(plan: Plan, per_node: bool = False) -> str:
    """The plan as JSON: folded changes with their `nodes` list (PER_NODE: one entry per node and resource).

    Either way a `summary` object holds the verdict, counts, the changing nodes and the follow-up steps
    (`consequences`).
    """
    data = plan.model_dump(mode="json", exclude=None if per_node else {"changes"})
    summary: dict[str, object] = {"verdict": plan.verdict(), "counts": dict(plan.counts()),
                                  "nodes_changing": plan.nodes_changing(), "consequences": plan.consequences()}
    if not per_node:
        entries = fold_changes(_shown(plan))
        data["changes"] = [e.to_json() for e in entries]
        summary["line"] = summary_line([e for e in entries if e.action in CHANGING])
    data["summary"] = summary
    return json.dumps(data, indent=2) + "\n"


def _md_change(change: Change | FoldedChange, with_diff: bool) -> str:
    title = f"{SYMBOLS[change.action]} <code>{change.driver}</code> {change.summary or change.resource}"
    if with_diff and change.diff:
        return f"<details><summary>{title}</summary>\n\n```diff\n{change.diff.rstrip()}\n```\n\n</details>\n"
    return f"- {title}\n"


FULL_PLAN_HINT = "run `reconciler plan DIR` for the full plan"


def _md_body(plan: Plan, entries: list[FoldedChange] | None, with_diffs: bool) -> list[str]:
    """Per node set (per node when ENTRIES is None), a heading and each change, its diff collapsible."""
    body = []
    if entries is None:
        for node, changes in _by_node([c for c in plan.changes if c.changing]).items():
            body.append(f"\n#### `{node}`\n")
            body += [_md_change(c, with_diffs) for c in changes]
        return body
    for nodeset, items in by_nodeset(entries).items():
        count = items[0].count
        body.append(f"\n#### `{cap_nodeset(nodeset)}`" + (f" ({count:,} nodes)\n" if count > 1 else "\n"))
        body += [_md_change(e, with_diffs) for e in items]
    return body


def render_markdown(plan: Plan, *, title: str = "Reconciler plan", extra_sections: list[str] | None = None,
                    limit: int = MARKDOWN_LIMIT, full_plan_hint: str = FULL_PLAN_HINT,
                    per_node: bool = False) -> str:
    """Markdown for a PR comment or CI summary, identical changes folded, truncated under `limit` characters."""
    head = [MARKER, f"### {title}", "", f"**{plan.verdict()}** — planned `{plan.commit or plan.source}`", ""]
    entries = None if per_node else fold_changes(c for c in plan.changes if c.changing)
    if entries:
        head += [f"Summary: {summary_line(entries)}", ""]
    consequences = plan.consequences()
    if consequences:
        head += ["**Consequences**", ""] + [f"- {c}" for c in consequences] + [""]
    needs = [line.strip() for line in _needs_text(plan)]
    if needs:
        head += ["**Needs a reboot or driver reload**", ""] + [f"- {line}" for line in needs] + [""]
    if plan.rollout and plan.rollout.get("lines") and plan.has_changes:
        windows = _windows_text(plan.rollout.get("windows"), any(c.needs for c in plan.changing()))
        head += (["**Rollout**", ""] + [f"- {line}" for line in plan.rollout["lines"]]
                 + [f"- {line.removeprefix('  - ')}" for line in windows] + [""])
    if plan.unreachable:
        head += ["**Unreachable nodes**", ""] + [f"- `{n}`: {why}" for n, why in fold_reasons_by_node(plan.unreachable)]
        head.append("")
    if plan.errors:
        errors = plan.errors if per_node else fold_mentions(plan.errors, {c.node for c in plan.changes})
        head += ["**Errors**", ""] + [f"- {e}" for e in errors] + [""]
    if plan.warnings:
        head += ["**Warnings**", ""] + [f"- {w}" for w in plan.warnings] + [""]
    tail = [*(extra_sections or [])]
    text = "\n".join(head) + "\n" + "".join(_md_body(plan, entries, True)) + "\n".join(tail)
    if len(text) <= limit:
        return text
    note = f"\n> Diffs were truncated to fit the comment limit: {full_plan_hint}.\n"
    text = "\n".join(head) + "\n" + "".join(_md_body(plan, entries, False)) + note + "\n".join(tail)
    if len(text) > limit:
        text = text[: limit - len(note) - 20] + "\n…\n" + note
    return text
