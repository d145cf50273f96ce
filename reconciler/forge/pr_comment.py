"""The pull request's plan comment in Markdown: verdict, changes, drift and errors, within the forge's size limit."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

from reconciler.engine.fold import (
    SHORT_CAP,
    FoldedChange,
    cap_nodeset,
    fold_changes,
    fold_mentions,
    fold_reasons_by_node,
    summary_line,
)
from reconciler.engine.plan import Change
from reconciler.engine.report import MARKER, SYMBOLS
from reconciler.forge.pr_planning import PrPlan

RENDER_VERSION = "2"  # bump when the comment's layout changes: every PR is re-commented once
NOT_GATHERED = "their facts were not gathered this cycle (the daemon reads what the main branch needs)"


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _title(change: Change | FoldedChange) -> str:
    return _esc(f"{SYMBOLS.get(change.action, '?')} {change.summary or change.resource}")


def _by_nodeset_driver(entries: Iterable[FoldedChange]) -> dict[str, dict[str, list[FoldedChange]]]:
    """Folded entries under their node set, then their driver, in the order folding gave them."""
    grouped: dict[str, dict[str, list[FoldedChange]]] = {}
    for entry in entries:
        grouped.setdefault(entry.nodeset, {}).setdefault(entry.driver, []).append(entry)
    return grouped


def _nodes_md(nodeset: str, count: int) -> str:
    return f"**`{cap_nodeset(nodeset)}`**" + (f" ({count:,} nodes)" if count > 1 else "")


def _cut_diff(diff: str, budget: int | None) -> str:
    """DIFF, or its first lines within BUDGET characters and how many lines were left out."""
    diff = diff.rstrip()
    if budget is None or len(diff) <= budget:
        return diff
    lines = diff.splitlines()
    kept, size = [], 0
    for line in lines:
        if size + len(line) + 1 > budget:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept) + f"\n... {len(lines) - len(kept)} more line(s) not shown"


def _changes_md(entries: list[FoldedChange], with_diffs: bool, diff_budget: int | None = None) -> list[str]:
    """Per node set, per driver: a collapsible block with the diffs (or a one-line list without them)."""
    blocks = []
    for nodeset, drivers in _by_nodeset_driver(entries).items():
        parts = [_nodes_md(nodeset, next(iter(drivers.values()))[0].count) + "\n"]
        for driver, items in drivers.items():
            titles = "; ".join(_title(c) for c in items)
            diffs = [c for c in items if c.diff]
            if with_diffs and diffs:
                inner = []
                for change in items:
                    if len(items) > 1:
                        inner.append(f"- {_title(change)}")
                    if change.diff:
                        diff = _cut_diff(change.diff, diff_budget)
                        fence = _fence(diff)
                        inner.append(f"\n{fence}diff\n{diff}\n{fence}\n")
                parts.append(f"<details><summary><code>{driver}</code>: {titles}</summary>\n\n"
                             + "\n".join(inner) + "\n\n</details>\n")
            else:
                parts.append(f"- <code>{driver}</code>: {titles}\n")
        blocks.append("\n".join(parts) + "\n")
    return blocks


def _block_nodes(entries: list[FoldedChange]) -> list[int]:
    """How many nodes each block of _changes_md names (one block per node set)."""
    return [drivers[next(iter(drivers))][0].count for drivers in _by_nodeset_driver(entries).values()]


def _error_md(error: str) -> str:
    """`file:line:column`: key.path: message, as a list item."""
    match = re.match(r"(\S+?:\d+:\d+): (.*)$", error, re.S)
    if match:
        return f"- `{match.group(1)}`: {_esc(match.group(2))}"
    return f"- {_esc(error)}"


def _summary(report: PrPlan, own: list[FoldedChange]) -> list[str]:
    lines = [MARKER, f"### Reconciler plan for #{report.number}", "", f"**Verdict: {report.verdict()}**", ""]
    if own:
        lines += [f"Summary: {_esc(summary_line(own))}", ""]
    lines += [
             f"Planned commit `{report.head_sha}`" + (f" (`{report.head_ref}`)" if report.head_ref else "")
             + f" against the live cluster; main branch at `{report.base_commit or 'unknown'}`. "
             "Nothing is applied from a pull request: it is planned, and applied once merged.", ""]
    if report.status == "invalid":
        where = report.subdir.strip("/") or "."
        lines += [f"**Validation errors** (in `{where}/`)", ""] + [_error_md(e) for e in report.errors] + [""]
    elif report.status in ("error", "limits"):
        lines += ["**Error**", ""] + [f"- {_esc(e)}" for e in report.errors] + [""]
    plan = report.plan
    if plan is not None:
        consequences = plan.consequences()
        if consequences:
            lines += ["**Consequences** (when this commit is applied)", ""] + [f"- {_esc(c)}" for c in consequences]
            lines += [f"  - {_esc(r)}" for r in plan.consequence_reasons()] + [""]
        if plan.unreachable:
            lines += ["**Unreachable nodes**", ""] + [f"- `{n}`: {_esc(why)}"
                                                      for n, why in fold_reasons_by_node(plan.unreachable)] + [""]
        if plan.errors:
            errors = fold_mentions(plan.errors, {c.node for c in plan.changes})
            lines += ["**Errors**", ""] + [f"- {_esc(e)}" for e in errors] + [""]
        if plan.warnings:  # risk warnings (reconciler/desired/risks.py) and the like: not errors
            lines += ["**Warnings**", ""] + [_error_md(w) for w in plan.warnings] + [""]
        if report.not_gathered:
            lines += [f"**Not planned**: {NOT_GATHERED}; the daemon plans these once the PR is merged.", ""]
            lines += [f"- `{cap_nodeset(e.nodeset, SHORT_CAP)}` <code>{e.driver}</code>: {_esc(e.summary)}"
                      for e in fold_changes(report.not_gathered)]
            lines.append("")
    if report.checks:
        lines += ["**Health checks**", ""] + [f"- {_esc(c)}" for c in report.checks] + [""]
    if report.drift:
        nodes = sorted({c.node for c in report.drift})
        lines += [f"**Unmanaged drift on the cluster**: {len(report.drift)} change(s) on {len(nodes)} node(s) "
                  "differ from the main branch already (not from this PR; the next apply reverts them).", ""]
        drift_consequences = report.main_plan.consequences()
        if drift_consequences:
            lines += [f"- main's plan alone {c}" for c in drift_consequences] + [""]
    return lines


def render_pr_comment(report: PrPlan, *, limit: int = 65_536) -> str:
    """The PR comment in Markdown, under LIMIT characters: diffs go first, the summary always stays."""
    own = fold_changes(report.own)
    drift = fold_changes(report.drift)
    head = "\n".join(_summary(report, own)) + "\n"
    hint = (f"\n> Diffs were shortened or left out to fit the comment limit. For the full plan: `git fetch origin "
            f"{report.fetch_ref} && git checkout FETCH_HEAD`, then `reconciler plan "
            + (f"--cluster {report.cluster} " if report.cluster else "")
            + f"{report.subdir.strip('/') or '.'}` on a host that reaches the nodes.\n")

    def sections(own_diffs: bool, drift_diffs: bool, budget: int | None = None) -> list[list[str]]:
        out = []
        if own:
            out.append(["#### Changes from this pull request\n\n", *_changes_md(own, own_diffs, budget)])
        if drift:
            out.append(["#### Unmanaged drift on the cluster\n\n", *_changes_md(drift, drift_diffs, budget)])
        return out

    def attempt(own_diffs: bool, drift_diffs: bool, budget: int | None = None) -> str:
        text = head + "\n" + "".join("".join(p) for p in sections(own_diffs, drift_diffs, budget))
        return text if (own_diffs, drift_diffs, budget) == (True, True, None) else text + hint

    for own_diffs, drift_diffs in ((True, True), (True, False)):
        text = attempt(own_diffs, drift_diffs)
        if len(text) <= limit:
            return text
    # Every PR diff cut to an equal share of what is left, smaller shares until it fits.
    with_diffs = [c for c in own if c.diff]
    if with_diffs:
        fixed = len(attempt(True, False, 0))
        budget = (limit - fixed) // len(with_diffs)
        while budget >= 400:
            text = attempt(True, False, budget)
            if len(text) <= limit:
                return text
            budget = budget * 3 // 4
    text = attempt(False, False)
    if len(text) <= limit:
        return text
    # Even the one-line lists are too long: keep as many entries as fit, then say how many were left out.
    if len(head) + len(hint) + 200 > limit:
        head = head[: max(0, limit - len(hint) - 200)] + "\n…\n"
    text = head + "\n"
    left = 0
    counts = [[0, *_block_nodes(entries)] for entries in (own, drift) if entries]
    for part, nodes in zip(sections(False, False), counts, strict=True):
        for block, count in zip(part, nodes, strict=True):
            if len(text) + len(block) + len(hint) + 100 <= limit:
                text += block
            else:
                left += count
    if left:
        text += f"\n_…and {left} more node(s) not shown._\n"
    return text + hint
