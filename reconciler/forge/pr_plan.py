"""Plan every open pull request against the live cluster and keep one comment per PR up to date.

Each cycle the daemon gathers facts for the main branch's desired state; this module reuses those facts
for every open PR (no extra SSH round trip): it fetches the PR head through Git, exports its YAML files
(only regular files, never symlinks; nothing from the PR is executed, here or on a node), validates and
plans it, and tells apart what the PR changes from drift the cluster already has against main. A PR is
re-planned and re-commented only when its head or the fingerprint of the facts changed.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import git

from reconciler.common.isolate import ChildFailed, LimitExceeded, Limits, run_limited
from reconciler.desired.loader import (
    OVER_LIMITS,
    ConfigError,
    DesiredStateError,
    LoadedState,
    LoadLimits,
    Location,
    load_dir,
)
from reconciler.desired.source import describe_source
from reconciler.drivers import Driver, all_drivers
from reconciler.drivers.base import without_header
from reconciler.engine.context import Context
from reconciler.engine.fold import (
    SHORT_CAP,
    FoldedChange,
    cap_nodeset,
    fold_changes,
    fold_mentions,
    fold_reasons_by_node,
    summary_line,
)
from reconciler.engine.ops import WriteFile
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import make_plan, plan_followups
from reconciler.engine.report import MARKER, SYMBOLS
from reconciler.facts.models import ClusterFacts
from reconciler.forge.base import Forge, ForgeError, PullRequest, redact
from reconciler.model import AGE_SUFFIX, DesiredState

RENDER_VERSION = "2"  # bump when the comment's layout changes: every PR is re-commented once
LOCAL_REF = "refs/reconciler/pr/{number}"
MAX_FILE_BYTES = 4 << 20
MAX_TREE_BYTES = 64 << 20
MAX_TREE_FILES = 20_000
YAML_SUFFIXES = (".yaml", ".yml")
EXPORTED_SUFFIXES = (*YAML_SUFFIXES, AGE_SUFFIX)  # .age: ciphertext, compared by sha256, never decrypted here
DEFAULT_LIMITS = Limits()  # per PR: CPU time, memory, wall clock (the daemon's config may set others)
NOT_GATHERED = "their facts were not gathered this cycle (the daemon reads what the main branch needs)"

Status = Literal["ok", "invalid", "error", "limits"]
ResultStatus = Literal["created", "edited", "unchanged", "skipped", "failed"]


@dataclass
class PrReportResult:
    """What happened to one open pull request this cycle."""

    number: int
    head_sha: str
    status: ResultStatus
    verdict: str = ""
    comment_id: int | None = None
    error: str | None = None


@dataclass
class PrPlan:
    """A pull request's head validated and planned against the live facts."""

    number: int
    head_sha: str
    head_ref: str
    subdir: str
    status: Status
    main_plan: Plan
    plan: Plan | None = None
    errors: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    base_commit: str | None = None
    fetch_ref: str = ""

    @property
    def own(self) -> list[Change]:
        """Changes that come from the PR (not drift the main branch's plan shows as well)."""
        return [c for c in self.plan.changing() if not c.drift] if self.plan else []

    @property
    def not_gathered(self) -> list[Change]:
        """Resources the PR touches whose facts were not read this cycle (new nodes, new files)."""
        return [c for c in self.plan.changes if c.action == "unknown"] if self.plan else []

    @property
    def drift(self) -> list[Change]:
        """Unmanaged drift: what the cluster differs from the main branch."""
        return self.main_plan.changing()

    def verdict(self) -> str:
        """no changes / N change(s) on M node(s) / invalid, plus drift and unplanned nodes."""
        if self.status == "invalid":
            return f"invalid: {len(self.errors)} validation error(s)"
        if self.status == "limits":
            return f"over limits: {self.errors[0] if self.errors else 'planning was stopped'}"
        if self.status == "error" or self.plan is None:
            return "error: the plan could not be made"
        own = self.own
        nodes = sorted({c.node for c in own})
        text = f"{len(own)} change(s) on {len(nodes)} node(s)" if own else "no changes"
        extra = []
        if self.plan.unreachable:
            extra.append(f"{len(self.plan.unreachable)} node(s) unreachable")
        if self.not_gathered:
            extra.append(f"{len(self.not_gathered)} resource(s) not planned")
        if self.plan.errors:
            extra.append(f"{len(self.plan.errors)} error(s)")
        if self.drift:
            extra.append(f"{len(self.drift)} drift change(s) already on the cluster")
        return text + (f"; {'; '.join(extra)}" if extra else "")


# ---------------------------------------------------------------- Git: fetch and export a PR head


class PrFetchError(Exception):
    """The PR head could not be fetched (message redacted: no credentials from remote URLs)."""


def fetch_pr_head(repo: git.Repo, forge: Forge, number: int, remote: str = "origin") -> str:
    """Fetch the PR's head ref into refs/reconciler/pr/N; return its commit sha."""
    local = LOCAL_REF.format(number=number)
    try:
        repo.git.fetch("--no-tags", "--no-recurse-submodules", "--quiet", remote,
                       f"+{forge.pr_ref(number)}:{local}")
        return str(repo.commit(local).hexsha)
    except (git.GitCommandError, ValueError, git.BadName) as exc:
        stderr = getattr(exc, "stderr", "") or str(exc)
        last = [line for line in str(stderr).strip().splitlines() if line.strip()][-1:] or ["failed"]
        raise PrFetchError(redact(f"git fetch {forge.pr_ref(number)}: {last[0].strip()[:300]}")) from None


def export_tree(repo: git.Repo, sha: str, subdir: str, dest: Path) -> Path:
    """Write the files under SUBDIR of commit SHA into DEST (YAML, the `source:` files they name, `.age` files
    as ciphertext); return DEST.

    Only regular files (Git modes 100644/100755) are written; symlinks and submodules are skipped so a PR
    cannot make the loader read a file outside its tree, and nothing is ever executed. Each file is at most
    MAX_FILE_BYTES, the whole tree MAX_TREE_BYTES and MAX_TREE_FILES files: a PR cannot fill the disk.
    """
    dest.mkdir(parents=True, exist_ok=True)
    tree = repo.commit(sha).tree
    prefix = PurePosixPath(subdir.strip("/")) if subdir.strip("/.") else PurePosixPath()
    if str(prefix) != ".":
        try:
            tree = tree / str(prefix)
        except KeyError:
            return dest  # no such directory at this commit: load_dir reports "no YAML files found"
        if tree.type != "tree":
            return dest
    files = total = 0
    for item in tree.traverse():
        if not isinstance(item, git.Blob) or item.mode not in (0o100644, 0o100755):
            continue
        rel = PurePosixPath(item.path).relative_to(prefix) if str(prefix) != "." else PurePosixPath(item.path)
        if any(part in ("", ".", "..") for part in rel.parts) or (rel.parts and rel.parts[0] == ".git"):
            continue
        if rel.suffix in EXPORTED_SUFFIXES and item.size > MAX_FILE_BYTES:
            raise DesiredStateError([ConfigError(Location(str(rel), 1, 1), (),
                                                 f"file of {item.size} bytes is over {MAX_FILE_BYTES} bytes")])
        if item.size > MAX_FILE_BYTES:
            continue  # not YAML: a `source:` naming it is refused by the loader as missing
        files, total = files + 1, total + item.size
        if files > MAX_TREE_FILES or total > MAX_TREE_BYTES:
            raise DesiredStateError([ConfigError(Location(str(rel), 1, 1), (),
                                                 f"the tree is over {MAX_TREE_FILES} files or {MAX_TREE_BYTES} "
                                                 "bytes: not planned")])
        target = dest.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.data_stream.read())
    return dest


def _display_errors(exc: DesiredStateError, root: Path, subdir: str) -> list[str]:
    """Validation errors with paths as they are in the repository (SUBDIR/file:line:column)."""
    prefix = subdir.strip("/")
    out = []
    for error in exc.errors:
        text = str(error)
        if error.location is not None and prefix and prefix != ".":
            text = f"{prefix}/{text}"
        out.append(text.replace(str(root), prefix or "."))
    return out


# ---------------------------------------------------------------- planning


def _op_key(op: Any) -> tuple[Any, ...]:
    if isinstance(op, WriteFile):
        return ("write", op.path, without_header(op.content), op.mode, op.owner, op.group, op.after)
    return (op.kind, op.model_dump_json(exclude={"description"}))


def drift_key(change: Change) -> tuple[Any, ...]:
    """What makes two changes "the same" across plans of two commits (our file header aside)."""
    if change.ops:
        return (change.node, change.driver, change.resource, change.action, tuple(_op_key(o) for o in change.ops))
    return (change.node, change.driver, change.resource, change.action, change.summary)


def _mark_not_gathered(plan: Plan, facts: ClusterFacts) -> set[str]:
    """Changes that rest on facts nobody gathered (the PR asks for more than main did) become "unknown".

    Every file and stat a driver asks for comes back in the facts (`exists: false` when absent), and the
    commands (mount table, Slurm version, Slurm's view) are asked of every node already; so a change to a
    path that is missing from a node's facts is one that main's gathering did not cover. Returns the drivers
    whose changes were marked.
    """
    marked: set[str] = set()
    for name in list(plan.unreachable):
        if name not in facts.nodes:  # a node the main branch does not have: no facts, not unreachable
            del plan.unreachable[name]
    for change in plan.changes:
        node_facts = facts.nodes.get(change.node)
        if change.driver == "ssh" and node_facts is None:
            change.summary = "a node new in this PR: no facts yet"
        if node_facts is None or not change.changing or not change.resource.startswith("/"):
            continue
        if change.resource not in node_facts.files and change.resource not in node_facts.stats:
            change.action = "unknown"
            change.summary = change.summary or change.resource
            change.ops = []
            marked.add(change.driver)
    return marked


def plan_pull_request(loaded: LoadedState, facts: ClusterFacts, main_plan: Plan, drivers: Sequence[Driver],
                      source: str, base: DesiredState | None = None) -> Plan:
    """Plan LOADED against FACTS; flag as drift every change that main's plan has too. Nothing is decrypted:
    age-encrypted files are compared by ciphertext with BASE's (the main branch's desired state)."""
    ctx = Context(loaded=loaded, source=source, facts=facts, read_secrets=False, base=base)
    plan = make_plan(ctx, drivers)
    if _mark_not_gathered(plan, facts):
        plan.followups = plan_followups(ctx, plan, drivers)  # again: changes resting on facts not gathered do not count
    drift_keys = {drift_key(c) for c in main_plan.changing()}
    for change in plan.changing():
        change.drift = drift_key(change) in drift_keys
    from reconciler.rollout.runner import annotate

    annotate(ctx, plan)  # the waves merging it would go out in
    return plan


def plan_main(base: LoadedState, facts: ClusterFacts, drivers: Sequence[Driver]) -> tuple[Context, Plan]:
    """The main branch's own plan against the live facts: what it shows is unmanaged drift."""
    ctx = Context(loaded=base, source=describe_source(base.root, base.commit), facts=facts)
    return ctx, make_plan(ctx, drivers)


def _load_and_plan(root: Path, sha: str, subdir: str, facts: ClusterFacts, main_plan: Plan,
                   drivers: Sequence[Driver], source: str, load_limits: LoadLimits | None,
                   base: DesiredState | None = None) -> tuple[Status, list[str], Plan | None]:
    """Validate and plan an exported PR tree: the part that runs the PR's input, isolated by the caller."""
    try:
        loaded = load_dir(root, commit=sha, limits=load_limits)
    except DesiredStateError as exc:
        errors = _display_errors(exc, root, subdir)
        over = [e for e in errors if f": {OVER_LIMITS}: " in e]
        return ("limits", over, None) if over else ("invalid", errors, None)
    try:
        return "ok", [], plan_pull_request(loaded, facts, main_plan, drivers, source, base)
    except Exception as exc:  # a renderer bug must not stop the other PRs
        return "error", [f"{type(exc).__name__}: {exc}"], None


def build_pr_plan(repo: git.Repo, subdir: str, pr: PullRequest, sha: str, facts: ClusterFacts,
                  main_ctx: Context, main_plan: Plan, drivers: Sequence[Driver], checks: list[str],
                  fetch_ref: str = "", limits: Limits | None = None,
                  load_limits: LoadLimits | None = None) -> PrPlan:
    """Export, validate and plan one PR head (already fetched) against the live facts.

    The tree is exported here (Git reads only, sizes bounded); validating and planning it, the part that
    parses what the PR author wrote, runs in a child process under LIMITS (reconciler/common/isolate.py) when
    given: a PR that breaks one gets status "limits" and the name of the limit.
    """
    name = PurePosixPath(subdir.strip("/")).name or Path(repo.working_dir or ".").name
    result = PrPlan(number=pr.number, head_sha=sha, head_ref=pr.head_ref, subdir=subdir, status="ok",
                    main_plan=main_plan, checks=list(checks), base_commit=main_ctx.loaded.commit,
                    fetch_ref=fetch_ref or f"refs/pull/{pr.number}/head")
    with tempfile.TemporaryDirectory(prefix="reconciler-pr-") as tmp:
        root = Path(tmp) / name
        try:
            export_tree(repo, sha, subdir, root)
        except DesiredStateError as exc:
            result.status = "invalid"
            result.errors = _display_errors(exc, root, subdir)
            return result
        args = (root, sha, subdir, facts, main_plan, drivers, f"{name} @ {sha[:12]}", load_limits, main_ctx.state)
        try:
            result.status, result.errors, result.plan = (
                run_limited(_load_and_plan, args, limits) if limits is not None else _load_and_plan(*args))
        except LimitExceeded as exc:
            result.status, result.errors = "limits", [f"validating and planning this PR broke the {exc}"]
        except ChildFailed as exc:
            result.status, result.errors = "error", [str(exc)]
    return result


# ---------------------------------------------------------------- Markdown


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
            f"{report.subdir.strip('/') or '.'}` on a host that reaches the nodes.\n")

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


# ---------------------------------------------------------------- cache of what was reported


def facts_fingerprint(facts: ClusterFacts, base: LoadedState, checks_status: Sequence[str]) -> str:
    """A hash of the facts, main's commit and the health-check status: a PR is re-planned when it changes."""
    doc = {"facts": facts.model_dump(mode="json"), "base": base.commit, "checks": list(checks_status),
           "render": RENDER_VERSION}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass
class Reported:
    """The last report of one PR."""

    head_sha: str
    facts_fingerprint: str
    comment_id: int | None


_MEMORY: dict[tuple[str, int], Reported] = {}


class ReportCache:
    """What was last reported per (forge, PR): in the daemon's sqlite database, or in memory without one."""

    def __init__(self, conn: sqlite3.Connection | None) -> None:
        self.conn = conn
        if conn is not None:
            conn.execute("CREATE TABLE IF NOT EXISTS pr_reports (forge TEXT NOT NULL, pr INTEGER NOT NULL, "
                         "head_sha TEXT NOT NULL, facts_fingerprint TEXT NOT NULL, comment_id INTEGER, "
                         "updated REAL NOT NULL, PRIMARY KEY (forge, pr))")
            conn.commit()

    def get(self, forge: str, pr: int) -> Reported | None:
        """The last report of a PR, if any."""
        if self.conn is None:
            return _MEMORY.get((forge, pr))
        row = self.conn.execute("SELECT head_sha, facts_fingerprint, comment_id FROM pr_reports "
                                "WHERE forge = ? AND pr = ?", (forge, pr)).fetchone()
        return Reported(row[0], row[1], row[2]) if row else None

    def put(self, forge: str, pr: int, reported: Reported) -> None:
        """Remember a report."""
        if self.conn is None:
            _MEMORY[(forge, pr)] = reported
            return
        self.conn.execute("INSERT OR REPLACE INTO pr_reports (forge, pr, head_sha, facts_fingerprint, comment_id, "
                          "updated) VALUES (?, ?, ?, ?, ?, ?)",
                          (forge, pr, reported.head_sha, reported.facts_fingerprint, reported.comment_id, time.time()))
        self.conn.commit()

    def forget_closed(self, forge: str, open_prs: set[int]) -> None:
        """Drop the rows of PRs that are no longer open."""
        if self.conn is None:
            for key in [k for k in _MEMORY if k[0] == forge and k[1] not in open_prs]:
                del _MEMORY[key]
            return
        rows = self.conn.execute("SELECT pr FROM pr_reports WHERE forge = ?", (forge,)).fetchall()
        for (pr,) in rows:
            if pr not in open_prs:
                self.conn.execute("DELETE FROM pr_reports WHERE forge = ? AND pr = ?", (forge, pr))
        self.conn.commit()


def _prune_refs(repo: git.Repo, open_prs: set[int]) -> None:
    """Delete refs/reconciler/pr/N of PRs that are no longer open."""
    listing = repo.git.for_each_ref("--format=%(refname)", "refs/reconciler/pr/")
    for ref in listing.split():
        match = re.fullmatch(r"refs/reconciler/pr/(\d+)", ref)
        if match and int(match.group(1)) not in open_prs:
            repo.git.update_ref("-d", ref)


# ---------------------------------------------------------------- the daemon's entry point


def report_pull_requests(repo: git.Repo, subdir: str, forge: Forge, facts: ClusterFacts, base: LoadedState,
                         conn: sqlite3.Connection | None, checks_status: list[str], log: Any, *,
                         remote: str = "origin", drivers: Sequence[Driver] | None = None,
                         limits: Limits | None = DEFAULT_LIMITS,
                         load_limits: LoadLimits | None = None) -> list[PrReportResult]:
    """Plan every open PR against this cycle's facts and upsert its comment, when its head or the facts changed.

    Each PR is validated and planned in a child process under LIMITS (None: in this process); one that
    breaks them gets a comment naming the limit, and the next PR is planned.
    """
    drivers = list(drivers) if drivers is not None else all_drivers()
    cache = ReportCache(conn)
    try:
        prs = forge.open_pull_requests()
    except ForgeError as exc:
        log.warning("prs.list_failed", forge=forge.kind, error=str(exc), transient=exc.transient)
        return []
    fingerprint = facts_fingerprint(facts, base, checks_status)
    main: tuple[Context, Plan] | None = None
    results = []
    for pr in sorted(prs, key=lambda p: p.number):
        last = cache.get(forge.ident, pr.number)
        if last is not None and last.head_sha == pr.head_sha and last.facts_fingerprint == fingerprint:
            results.append(PrReportResult(pr.number, pr.head_sha, "skipped", comment_id=last.comment_id))
            continue
        try:
            sha = fetch_pr_head(repo, forge, pr.number, remote)
        except PrFetchError as exc:
            log.warning("prs.fetch_failed", pr=pr.number, error=str(exc))
            results.append(PrReportResult(pr.number, pr.head_sha, "failed", error=str(exc)))
            continue
        if main is None:
            try:
                main = plan_main(base, facts, drivers)
            except Exception as exc:  # main's own plan failing is the daemon's to report; no PR can be judged
                log.error("prs.main_plan_failed", error=f"{type(exc).__name__}: {exc}")
                return results
        report = build_pr_plan(repo, subdir, pr, sha, facts, main[0], main[1], drivers, checks_status,
                               forge.pr_ref(pr.number), limits=limits, load_limits=load_limits)
        if report.status == "limits":
            log.warning("prs.over_limits", pr=pr.number, sha=sha[:12], error=report.errors[0][:300])
        body = render_pr_comment(report, limit=min(forge.comment_limit, 65_536) - 1)
        try:
            upserted = forge.upsert_comment(pr, body, MARKER)
        except (ForgeError, ValueError) as exc:
            transient = isinstance(exc, ForgeError) and exc.transient
            log.warning("prs.comment_failed", pr=pr.number, error=str(exc), transient=transient)
            results.append(PrReportResult(pr.number, sha, "failed", verdict=report.verdict(), error=str(exc)))
            continue
        cache.put(forge.ident, pr.number, Reported(sha, fingerprint, upserted.comment.id))
        log.info("prs.reported", pr=pr.number, sha=sha[:12], verdict=report.verdict(), comment=upserted.action,
                 chars=len(body))
        results.append(PrReportResult(pr.number, sha, upserted.action, verdict=report.verdict(),
                                      comment_id=upserted.comment.id))
    open_numbers = {p.number for p in prs}
    cache.forget_closed(forge.ident, open_numbers)
    try:
        _prune_refs(repo, open_numbers)
    except git.GitCommandError as exc:
        log.warning("prs.prune_failed", error=redact(str(exc))[:300])
    return results
