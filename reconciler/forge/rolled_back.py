"""Tell a merged pull request that its commit was rolled back: a banner on top of our comment on it.

The pull request is found from the merge commit's message, as the forges write it: GitHub's merge commit
("Merge pull request #12 from ..."), a squash or rebase merge ("Subject (#12)"), Gitea's ("Merge pull request
'Title' (#12) from ...", a squash "Title (#12)"; `!12` instead of `#12` in a repository with an external issue
tracker, as Gitea's services/pull/merge.go getMergeMessage writes it), GitLab's ("See merge request
group/project!12"). The comment keeps the plan it showed before the merge, under the banner.
"""

from __future__ import annotations

import re
from typing import Any

from reconciler.forge.base import MARKER, Forge, PullRequest, Upserted

BANNER_START = "<!-- reconciler:rolled-back -->"
BANNER_END = "<!-- /reconciler:rolled-back -->"
_PATTERNS = (re.compile(r"^Merge pull request #(\d+)\b"), re.compile(r"^Merge pull request '.*' \([#!](\d+)\) from "),
             re.compile(r"See merge request \S*!(\d+)\b"),
             re.compile(r"\([#!](\d+)\)\s*$", re.MULTILINE))


def merged_pr_number(message: str) -> int | None:
    """The pull request a merge commit's MESSAGE names, or None (a direct push)."""
    for pattern in _PATTERNS:
        hit = pattern.search(message.strip())
        if hit is not None:
            return int(hit.group(1))
    return None


def _md(text: object) -> str:
    """Cluster text inside a Markdown line: no HTML, no code-span breakouts."""
    return str(text).replace("<", "&lt;").replace(">", "&gt;").replace("`", "'").replace("\n", " ")[:400]


def banner(commit: str, record: dict[str, Any]) -> str:
    """The rolled-back banner: gate, wave, nodes, why, what was put back, how to try again."""
    title = (f"### :warning: Rollback INCOMPLETE: commit `{commit[:12]}` did not pass its rollout"
             if record.get("status") == "rollback-failed" else
             f"### :rewind: Rolled back: commit `{commit[:12]}` did not pass its rollout")
    lines = [BANNER_START, title,
             "", f"- **Gate**: {_md(record.get('gate') or '?')} (wave {_md(record.get('wave') or '?')})",
             f"- **Nodes**: `{_md(record.get('nodes') or '-')}`", f"- **Why**: {_md(record.get('message') or '')}"]
    if record.get("reverted") and record.get("before_image"):
        lines.append(f"- **Restored**: {_md(record.get('headline') or '')}"
                     + (f"; resumed `{_md(', '.join(record.get('resumed') or []))}`" if record.get("resumed") else ""))
    elif record.get("reverted"):
        lines.append(f"- **Put back** on `{_md(record['reverted'])}` to `{str(record.get('to') or '-')[:12]}`"
                     + (f"; resumed `{_md(', '.join(record.get('resumed') or []))}`" if record.get("resumed") else ""))
    if record.get("status") == "rollback-failed" and record.get("errors"):
        lines.append(f"- **Rollback failed**: {_md('; '.join(str(e) for e in record['errors']))}")
    lines += ["", f"The daemon will not apply this commit again. A newer commit is tried as usual; "
              f"`reconciler rollout retry {commit[:12]}` forces this one.", BANNER_END, ""]
    return "\n".join(lines)


def with_banner(body: str, note: str) -> str:
    """BODY (our comment) with NOTE under the marker, replacing an earlier banner."""
    rest = body.lstrip()
    if rest.startswith(MARKER):
        rest = rest[len(MARKER):].lstrip("\n")
    if BANNER_START in rest and BANNER_END in rest:
        rest = rest[:rest.index(BANNER_START)] + rest[rest.index(BANNER_END) + len(BANNER_END):].lstrip("\n")
    return f"{MARKER}\n{note}\n{rest}".rstrip("\n") + "\n"


def note_rolled_back(forge: Forge, message: str, commit: str, record: dict[str, Any]) -> Upserted | None:
    """Put the banner on the comment of the pull request merged as COMMIT; None when no PR is named."""
    number = merged_pr_number(message)
    if number is None:
        return None
    pr = PullRequest(number=number, head_sha="", head_ref="", title="")
    existing = forge.find_comment(pr)
    body = with_banner(existing.body if existing else "", banner(commit, record))
    if len(body) > forge.comment_limit:
        body = with_banner("", banner(commit, record))
    return forge.upsert_comment(pr, body)
