"""The PR comment of a multi-cluster repository: a header naming the clusters the change touches and those it
does not, then one section per touched cluster, between markers naming the cluster.

Each cluster's daemon writes only its own section; it keeps the others' sections as it finds them (a section
planned for an earlier push becomes "waiting" again) and shows "waiting for <name>'s daemon" for a touched
cluster whose daemon has not written yet. The text here is pure: reading and writing the comment is
pr_shared_comment.py's job.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from reconciler.engine.report import MARKER

NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}"  # a cluster name that may go into a marker (others get no section)
_BEGIN = re.compile(rf"^<!-- reconciler-cluster: ({NAME}) "
                    r"(?:head=([0-9a-f]{7,64}) fp=([0-9a-f]{1,64})|waiting) -->$", re.M)
_END = "<!-- /reconciler-cluster: {name} -->"
_VIEW = re.compile(r"^<!-- reconciler-clusters head=([0-9a-f]{7,64}) nosection=(\S*) -->$", re.M)


@dataclass(frozen=True)
class Section:
    """One cluster's section as found in a comment: the commit and facts it was planned for, its text."""

    cluster: str
    head: str | None  # None: a "waiting" placeholder
    fp: str
    text: str


@dataclass
class ClusterView:
    """What a change does to the clusters of the repository, as one daemon worked it out."""

    touched: list[str] = field(default_factory=list)
    untouched: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    error: str | None = None  # which clusters it touches could not be worked out (the PR's tree is too big, ...)


def valid_name(name: str) -> bool:
    """True when NAME can stand in a section marker (a PR's directory names are not trusted)."""
    return re.fullmatch(NAME, name) is not None


def _names(names: list[str]) -> str:
    # a PR's directory names are shown, never interpreted: escaped, and no backtick can end the code span
    return ", ".join(f"`{html.escape(n.replace('`', chr(39)), quote=False)}`" for n in names)


def parse_sections(body: str) -> dict[str, Section]:
    """Every cluster section of BODY (a marker pair on lines of their own), by cluster name."""
    out: dict[str, Section] = {}
    for begin in _BEGIN.finditer(body):
        name = begin.group(1)
        end = body.find("\n" + _END.format(name=name), begin.end())
        if end < 0 or name in out:
            continue
        out[name] = Section(name, begin.group(2), begin.group(3) or "", body[begin.end() + 1: end + 1])
    return out


def section_is_current(body: str, cluster: str, head: str, fp: str) -> bool:
    """True when BODY holds what CLUSTER's daemon wrote for HEAD with facts FP: its section, or the header
    saying the change does not touch it."""
    section = parse_sections(body).get(cluster)
    if section is not None:
        return section.head == head and section.fp == fp
    view = _VIEW.search(body)
    return view is not None and view.group(1) == head and cluster in view.group(2).split(",")


def waiting_text(cluster: str, earlier: str | None = None) -> str:
    """The placeholder of a touched cluster whose daemon has not planned this head yet."""
    text = f"### Cluster `{cluster}`\n\n_waiting for {cluster}'s daemon_"
    if earlier:
        text += f" (its plan of the earlier commit `{earlier}` is out of date)"
    return text + "\n"


def _header(number: int, head_sha: str, head_ref: str, view: ClusterView) -> str:
    nosection = ",".join(n for n in [*view.untouched, *view.removed] if valid_name(n))
    lines = [MARKER, f"### Reconciler plan for #{number}", f"<!-- reconciler-clusters head={head_sha} "
             f"nosection={nosection} -->", "",
             f"Planned commit `{head_sha}`" + (f" (`{html.escape(head_ref, quote=False)}`)" if head_ref else "")
             + ": each cluster's daemon plans it against its own live cluster and writes its own section below. "
             "Nothing is applied from a pull request: it is planned, and applied once merged.", ""]
    if view.error:
        lines += [f"**Which clusters this change touches could not be worked out**: "
                  f"{html.escape(view.error, quote=False)}", ""]
    lines.append(f"**Clusters this change touches**: {_names(view.touched) or 'none'}  ")
    lines.append(f"**Clusters this change does not touch**: {_names(view.untouched) or 'none'}"
                 + (" (their desired state is the same as on the main branch)" if view.untouched else ""))
    if view.removed:
        lines[-1] += "  "
        lines.append(f"**Clusters this change removes**: {_names(view.removed)}")
    return "\n".join(lines) + "\n"


def _wrap(name: str, head: str | None, fp: str, text: str) -> str:
    begin = f"<!-- reconciler-cluster: {name} " + (f"head={head} fp={fp}" if head else "waiting") + " -->"
    return f"\n{begin}\n{text.rstrip(chr(10))}\n{_END.format(name=name)}\n"


def compose(old_body: str | None, *, number: int, head_sha: str, head_ref: str, view: ClusterView, cluster: str,
            fp: str, own: Callable[[int], str] | None, limit: int) -> str:
    """The comment with CLUSTER's section from OWN (called with a size budget; None: not touched, no section)
    and every other touched cluster's section kept from OLD_BODY, under LIMIT characters."""
    found = parse_sections(old_body or "")
    header = _header(number, head_sha, head_ref, view)
    names = [n for n in view.touched if valid_name(n)]
    others: dict[str, str] = {}
    for name in names:
        if name == cluster:
            continue
        kept = found.get(name)
        if kept is not None and kept.head == head_sha:
            others[name] = _wrap(name, kept.head, kept.fp, kept.text)
        else:
            others[name] = _wrap(name, None, "", waiting_text(name, kept.head if kept else None))
    own_text = ""
    if own is not None and cluster in names:
        share = (limit - len(header) - 200 * len(names)) // max(1, len(names))
        room = limit - len(header) - sum(len(t) for t in others.values()) - 200
        own_text = _wrap(cluster, head_sha, fp, own(max(1000, min(share, room))))
    return header + "".join(own_text if name == cluster else others[name] for name in names)
