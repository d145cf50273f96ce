"""What `reconciler status` and the status page show of a cluster's promotion: the cluster, what it holds back and
why, and how long after the earlier cluster each commit was applied here."""

from __future__ import annotations

import html
import time
from typing import Any

from reconciler.common import clock
from reconciler.daemon.logs import scrub
from reconciler.daemon.promotion_http import CLUSTER_KEY, PROMOTED_KEY, PROMOTION_KEY
from reconciler.daemon.promotion_operator import KEY as OPERATOR_KEY
from reconciler.daemon.promotion_operator import by
from reconciler.daemon.store import Store
from reconciler.desired.promotion import PromotionRule
from reconciler.rollout.windows import state_at

SHOWN = 5  # promoted commits listed


def load(store: Store) -> dict[str, Any]:
    """The promotion view's data from a store: cluster, decision (the journal), promoted (lags), newest first."""
    row = store.get(OPERATOR_KEY) or {}
    operator = {"hold": row.get("hold"), "hotfix": row.get("hotfix"), "back": row.get("back"),
                "approvals": dict(sorted((row.get("approvals") or {}).items(), key=lambda kv: -float(kv[1]["at"]))
                                  [:SHOWN]),
                "hotfixes": list(reversed(row.get("hotfixes") or []))[:SHOWN],
                "history": list(reversed(row.get("history") or []))[:SHOWN]}
    return {"cluster": store.get(CLUSTER_KEY), "promotion": store.get(PROMOTION_KEY),
            "promoted": list(reversed(store.get(PROMOTED_KEY) or []))[:SHOWN], "promotion_operator": operator}


def operator_lines(operator: dict[str, Any] | None) -> list[str]:
    """The operator's part: the hold, a pending hotfix or back, the approvals and the hotfixes applied."""
    operator = operator or {}
    out = []
    hold = operator.get("hold")
    if hold:
        kind = {"back": f"went back from {str(hold.get('from'))[:12]} to {str(hold.get('pin'))[:12]}",
                "rollback": f"after {str(hold.get('commit'))[:12]} was rolled back", "manual": "by hand"}.get(
                    str(hold.get("kind")), str(hold.get("kind")))
        out.append(f"HELD ({kind}): {by(hold)}; `reconciler promote release` lets promotion go on")
    if operator.get("back"):
        out.append(f"going back asked: {by(operator['back'])}")
    if operator.get("hotfix"):
        out.append(f"hotfix asked: {str(operator['hotfix']['commit'])[:12]} ({by(operator['hotfix'])})")
    for commit, req in (operator.get("approvals") or {}).items():
        out.append(f"approved: {commit[:12]} ({by(req)})")
    for req in operator.get("hotfixes") or []:
        out.append(f"hotfix: {str(req.get('commit'))[:12]} applied at {_stamp(req.get('applied_at'))} ({by(req)})")
    return out


def _stamp(ts: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(ts))) if ts else "-"


def hold_line(promotion: dict[str, Any]) -> str | None:
    """One line on what is held back and why (None when nothing is)."""
    if not promotion.get("holding"):
        return None
    line = (f"holding {str(promotion['holding'])[:12]} since {_stamp(promotion.get('since'))}: "
            f"{promotion.get('message')}")
    if promotion.get("unreachable_since"):
        line += f" [{promotion['after']}'s daemon unreachable since {_stamp(promotion['unreachable_since'])}]"
    return line


def lag_line(entry: dict[str, Any]) -> str:
    """One promoted commit: applied here how long after the earlier cluster."""
    return (f"{str(entry.get('commit'))[:12]} applied {float(entry.get('seconds') or 0):.1f}s after the earlier "
            f"cluster (at {_stamp(entry.get('applied_at'))})")


def status_lines(data: dict[str, Any]) -> list[str]:
    """The promotion part of `reconciler status` (nothing for a daemon without `cluster:`)."""
    if not data.get("cluster"):
        return []
    out = [f"cluster:        {data['cluster']}"]
    promotion = data.get("promotion") or {}
    if promotion:
        out.append(f"promotion:      after {promotion.get('after')} ({promotion.get('source') or 'no source'}); "
                   f"checked {_stamp(promotion.get('checked_at'))}")
        out.append(f"  {hold_line(promotion) or 'nothing held back'}")
        for commit, why in sorted((promotion.get("rejected") or {}).items()):
            out.append(f"  never promoted: {commit[:12]} ({promotion.get('after')} rolled it back: gate "
                       f"{why.get('gate')}: {why.get('message')})")
    out += [f"  {line}" for line in operator_lines(data.get("promotion_operator"))]
    for entry in data.get("promoted") or []:
        out.append(f"  promoted: {lag_line(entry)}")
    return out


def _t(value: object) -> str:
    return html.escape(scrub(str(value)), quote=True)


def section(data: dict[str, Any] | None) -> str:
    """The status page's promotion section ('' for a daemon without `cluster:`)."""
    if not data or not data.get("cluster"):
        return ""
    promotion = data.get("promotion") or {}
    items = [f'<dt>cluster</dt><dd id="cluster">{_t(data["cluster"])}</dd>']
    if promotion:
        items.append(f"<dt>after</dt><dd>{_t(promotion.get('after'))} <span class=\"muted\">(checked "
                     f"{_t(_stamp(promotion.get('checked_at')))})</span></dd>")
        hold = hold_line(promotion)
        items.append(f'<dt>held back</dt><dd id="holding" class="{"bad" if hold else "ok"}">'
                     f"{_t(hold or 'nothing')}</dd>")
        for commit, why in sorted((promotion.get("rejected") or {}).items()):
            items.append(f"<dt>never promoted</dt><dd><code>{_t(commit[:12])}</code> {_t(promotion.get('after'))} "
                         f"rolled it back (gate {_t(why.get('gate'))}: {_t(why.get('message'))})</dd>")
    for line in operator_lines(data.get("promotion_operator")):
        word, _, rest = line.partition(":")
        css = "bad" if word.startswith("HELD") else "operator"
        items.append(f'<dt>{_t(word.split(" (")[0].lower())}</dt><dd class="{css}">{_t(line)}</dd>')
    for entry in data.get("promoted") or []:
        items.append(f'<dt>promoted</dt><dd class="promoted">{_t(lag_line(entry))}</dd>')
    return '<section id="promotion"><h2>Promotion</h2><dl>' + "".join(items) + "</dl></section>"


def _md(text: object) -> str:
    """An operator's words inside a PR comment: shown, never interpreted (no HTML, no code span closed)."""
    return html.escape(scrub(str(text)), quote=False).replace("`", "'")


def _span(seconds: int) -> str:
    """`45s`, `30m`, `2h`, `1h30m`: a soak as promotion.yaml writes it."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"


def pr_lines(data: dict[str, Any], rule: PromotionRule | None) -> list[str]:
    """What a merged commit meets on this cluster's way, for the end of its PR comment section."""
    cluster = _md(data.get("cluster"))
    operator = data.get("promotion_operator") or {}
    out = []
    if rule is not None:
        seconds = int(rule.soak.total_seconds())
        soak = f" and stayed healthy for {_span(seconds)}" if seconds else ""
        text = f"**Promotion**: once merged, `{cluster}` applies it after `{_md(rule.after_text)}` applied it{soak}"
        if rule.approval == "required":
            text += f", and only once approved (`reconciler promote approve COMMIT --cluster {cluster}`)"
        if rule.windows:
            where = state_at(rule.windows, clock.utcnow())
            text += f"; only inside its promotion windows (now {where.text() if where else 'open'})"
        out.append(text + ".")
    hold = operator.get("hold")
    if hold:
        out.append(f"**Held**: nothing merged reaches `{cluster}` until `reconciler promote release` "
                   f"({_md(hold.get('kind'))}, {_md(by(hold))}).")
    promotion = data.get("promotion") or {}
    if promotion.get("reason") == "approval-required" and promotion.get("holding"):
        out.append(f"Waiting for an approval now: `{str(promotion['holding'])[:12]}`.")
    for req in (operator.get("hotfixes") or [])[:1]:
        out.append(f"Last hotfix: `{str(req.get('commit'))[:12]}` applied at {_stamp(req.get('applied_at'))} "
                   f"({_md(by(req))}).")
    return out
