"""`reconciler import`: the accounting database (QOS, accounts, users, limits) as `accounting.yaml`.

Read with the accounting driver's own command (`sacctmgr -P -n show ...`) on the node imported from, and
written so that the first plan after the import changes nothing: every field the driver compares is written
when it differs from what Slurm would have anyway (a user's QOS inherited from its account is left out).
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from reconciler.drivers.accounting import PROTECTED_ACCOUNTS, PROTECTED_QOS, PROTECTED_USERS
from reconciler.drivers.accounting_facts import (
    ACCOUNT_FORMAT,
    AccountingFacts,
    Assoc,
    Qos,
    accounting_command,
    parse_accounting,
)

__all__ = ["ACCOUNT_FORMAT", "accounting_command", "accounting_doc", "parse_accounting"]


def _limits(limits: dict[str, str]) -> CommentedMap:
    """The limits that are set, as the desired state writes them (counts as integers)."""
    out = CommentedMap()
    for name, value in limits.items():
        if value in ("", "-1"):
            continue
        out[name] = int(value) if value.isdigit() and "TRES" not in name and "Wall" not in name else value
    return out


def _share(text: str) -> int | str:
    return int(text) if text.lstrip("-").isdigit() else text.lower()


def _qos(qos: Qos) -> CommentedMap:
    doc = CommentedMap(name=qos.name)
    if qos.description and qos.description != qos.name:
        doc["description"] = qos.description
    doc["priority"] = qos.priority
    if qos.preempt:
        doc["preempt"] = CommentedSeq(qos.preempt)
    if qos.preempt_mode and qos.preempt_mode != "cluster":
        doc["preempt_mode"] = qos.preempt_mode
    if qos.flags:
        doc["flags"] = CommentedSeq(qos.flags)
    if qos.usage_factor != 1.0:
        doc["usage_factor"] = qos.usage_factor
    limits = _limits(qos.limits)
    if limits:
        doc["limits"] = limits
    return doc


def _assoc_fields(doc: CommentedMap, assoc: Assoc | None, inherited_qos: list[str] | None, share_always: bool) -> None:
    """Fair-share, QOS, default QOS and limits of an association, into DOC."""
    if assoc is None:
        return
    if share_always or assoc.share not in ("1", ""):
        doc["fairshare"] = _share(assoc.share)
    if assoc.qos and assoc.qos != inherited_qos:
        doc["qos"] = CommentedSeq(assoc.qos)
    if assoc.default_qos:
        doc["default_qos"] = assoc.default_qos
    limits = _limits(assoc.limits)
    if limits:
        doc["limits"] = limits


def accounting_doc(facts: AccountingFacts, warnings: list[str]) -> CommentedMap:
    """The `accounting:` section for what FACTS shows (root, normal and partition associations aside)."""
    section = CommentedMap()
    qos = [_qos(q) for name, q in sorted(facts.qos.items()) if name not in PROTECTED_QOS]
    if qos:
        section["qos"] = CommentedSeq(qos)
    accounts = []
    tree = {a.account: a for a in facts.assocs if not a.user}
    depth: dict[str, int] = {}

    def level(name: str) -> int:
        seen = 0
        while name in tree and tree[name].parent and seen < 64:
            name, seen = tree[name].parent, seen + 1
        return seen

    for name in facts.accounts:
        depth[name] = level(name)
    for name in sorted(facts.accounts, key=lambda n: (depth[n], n)):
        if name in PROTECTED_ACCOUNTS:
            continue
        description, organization = facts.accounts[name]
        doc = CommentedMap(name=name)
        assoc = tree.get(name)
        if assoc is None:
            warnings.append(f"accounting: account {name} has no association on this cluster: left out")
            continue
        doc["parent"] = assoc.parent or "root"
        doc["description"] = description
        doc["organization"] = organization
        _assoc_fields(doc, assoc, None, share_always=True)
        accounts.append(doc)
    if accounts:
        section["accounts"] = CommentedSeq(accounts)
    users = []
    for name, (default, admin) in sorted(facts.users.items()):
        if name in PROTECTED_USERS:
            continue
        assocs = facts.user_assocs(name)
        if default not in assocs:
            warnings.append(f"accounting: user {name} has no association with its default account {default}: "
                            "left out")
            continue
        doc = CommentedMap(name=name, default_account=default)
        others = sorted(a for a in assocs if a != default)
        if others:
            doc["accounts"] = CommentedSeq(others)
        if admin and admin != "None":
            doc["admin_level"] = admin
        first = assocs[default]
        parent_qos = tree[default].qos if default in tree else None
        _assoc_fields(doc, first, parent_qos, share_always=False)
        differing = [a for a in others if _assoc_key(assocs[a]) != _assoc_key(first)]
        if differing:
            warnings.append(f"accounting: user {name}: the associations in {', '.join(differing)} have other "
                            f"settings than in {default}; only {default}'s are written (the first plan shows them)")
        users.append(doc)
    if users:
        section["users"] = CommentedSeq(users)
    return section


def _assoc_key(assoc: Assoc) -> tuple[Any, ...]:
    return assoc.share, assoc.default_qos, tuple(sorted(assoc.limits.items()))
