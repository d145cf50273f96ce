"""Render a plan as text (coloured diffs on a terminal), JSON or Markdown."""

from __future__ import annotations

import json
from collections import defaultdict

from reconciler.engine.plan import Change, Plan

COLOURS = {"+": "\033[32m", "-": "\033[31m", "@": "\033[36m"}
RESET = "\033[0m"
SYMBOLS = {"create": "+", "update": "~", "delete": "-", "unknown": "?", "error": "!", "ok": " "}
MARKDOWN_LIMIT = 65_536
MARKER = "<!-- reconciler:plan -->"


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


def render_text(plan: Plan, colour: bool = False, show_diffs: bool = True) -> str:
    """Human-readable plan: per node, each change with its diff, then consequences and verdict."""
    lines = [f"Plan for {plan.source}"]
    shown = [c for c in plan.changes if c.action != "ok"]
    for node, changes in _by_node(shown).items():
        lines.append(f"\n{node}:")
        for change in changes:
            lines.append(f"  {SYMBOLS[change.action]} [{change.driver}] {change.summary or change.resource}")
            if show_diffs and change.diff:
                lines.append(_colour_diff(change.diff, colour).rstrip("\n"))
    consequences = plan.slurm.describe()
    if consequences:
        lines.append("\nSlurm:")
        lines += [f"  - {text}" for text in consequences]
        lines += [f"    ({reason})" for reason in plan.slurm.reasons]
    for warning in plan.warnings:
        lines.append(f"\nwarning: {warning}")
    for error in plan.errors:
        lines.append(f"\nerror: {error}")
    lines.append(f"\n{plan.verdict()}")
    return "\n".join(lines) + "\n"


def render_json(plan: Plan) -> str:
    """The plan as JSON (the serialised Plan plus a summary)."""
    data = plan.model_dump(mode="json")
    data["summary"] = {"verdict": plan.verdict(), "counts": dict(plan.counts()),
                       "nodes_changing": plan.nodes_changing(), "slurm": plan.slurm.describe()}


    return json.dumps(data, indent=2) + "\n"


def _md_change(change: Change, with_diff: bool) -> str:
    title = f"{SYMBOLS[change.action]} <code>{change.driver}</code> {change.summary or change.resource}"
    if with_diff and change.diff:
        return f"<details><summary>{title}</summary>\n\n```diff\n{change.diff.rstrip()}\n```\n\n</details>\n"
    return f"- {title}\n"


FULL_PLAN_HINT = "run `reconciler plan DIR` for the full plan"


def render_markdown(plan: Plan, *, title: str = "Reconciler plan", extra_sections: list[str] | None = None,
                    limit: int = MARKDOWN_LIMIT, full_plan_hint: str = FULL_PLAN_HINT) -> str:
    """Markdown for a PR comment or CI summary, truncated under `limit` characters (diffs go first)."""
    head = [MARKER, f"### {title}", "", f"**{plan.verdict()}** — planned `{plan.commit or plan.source}`", ""]
    consequences = plan.slurm.describe()
    if consequences:
        head += ["**Consequences**", ""] + [f"- {c}" for c in consequences] + [""]
    if plan.unreachable:
        head += ["**Unreachable nodes**", ""] + [f"- `{n}`: {why}" for n, why in sorted(plan.unreachable.items())]
        head.append("")
    if plan.errors:
        head += ["**Errors**", ""] + [f"- {e}" for e in plan.errors] + [""]
    if plan.warnings:
        head += ["**Warnings**", ""] + [f"- {w}" for w in plan.warnings] + [""]
    tail = [*(extra_sections or [])]
    body = []
    for node, changes in _by_node([c for c in plan.changes if c.changing]).items():
        body.append(f"#### `{node}`\n")
        body += [_md_change(c, True) for c in changes]
    text = "\n".join(head) + "\n" + "".join(body) + "\n".join(tail)
    if len(text) <= limit:
        return text
    short = []
    for node, changes in _by_node([c for c in plan.changes if c.changing]).items():
        short.append(f"#### `{node}`\n")
        short += [_md_change(c, False) for c in changes]
    note = f"\n> Diffs were truncated to fit the comment limit: {full_plan_hint}.\n"
    text = "\n".join(head) + "\n" + "".join(short) + note + "\n".join(tail)
    if len(text) > limit:
        text = text[: limit - len(note) - 20] + "\n…\n" + note
    return text
