"""The accounting driver on sacctmgr outputs recorded on each release's testbed (tests/fixtures/slurm/R/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.drivers.accounting import Planner
from reconciler.drivers.accounting_facts import AccountingFacts, parse_accounting
from reconciler.model import Accounting
from tests.testbed_fixture import SLURM_RELEASES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
TREE = [{"name": "ml", "description": "machine learning", "organization": "research", "fairshare": 10,
         "qos": ["high", "normal"], "default_qos": "high", "limits": {"MaxWall": "00:10:00", "GrpTRES": "gres/gpu=16"}},
        {"name": "ml-vision", "parent": "ml", "fairshare": 2}]


def recorded(release: str) -> AccountingFacts:
    """The facts command's answer recorded on RELEASE's testbed."""
    return parse_accounting((FIXTURES / release / "accounting_show.txt").read_text())


def changes(desired: dict, facts: AccountingFacts) -> list[tuple[str, str, str, list[str]]]:
    """(resource, action, summary, commands) of every change, in apply order (by phase)."""
    planned = sorted(Planner(Accounting(**desired), facts, "rt", "ctl").plan(), key=lambda c: c.phase)
    return [(c.resource, c.action, c.summary, [op.command for op in c.ops]) for c in planned]  # type: ignore[union-attr]


@pytest.mark.parametrize("release", SLURM_RELEASES)
def test_the_recorded_database_parses_alike_on_each_release(release: str) -> None:
    facts = recorded(release)
    assert facts.error is None
    assert facts.users["gina"] == ("old", "None") and facts.users["root"] == ("root", "Administrator")
    ml = facts.account_assoc("ml")
    assert ml is not None and (ml.parent, ml.share, ml.qos, ml.default_qos) == ("root", "10", ["high", "normal"], "high")
    assert ml.limits["MaxWall"] == "00:10:00" and ml.limits["GrpTRES"] == "gres/gpu=16"
    assert facts.qos["high"].flags == ["DenyOnLimit"] and facts.qos["high"].limits["MaxTRESPerUser"] == "gres/gpu=8"
    assert sorted(facts.user_assocs("gina")) == ["ml", "old"]


@pytest.mark.parametrize("release", SLURM_RELEASES)
def test_removing_an_account_that_is_a_users_default_is_refused_with_the_user_named(release: str) -> None:
    """24.11 refuses it in sacctmgr, 22.05 strands the user without a default account: refused in the plan."""
    facts = recorded(release)
    absent = {"accounts": [*TREE, {"name": "old", "parent": "ml", "state": "absent"}]}
    assert changes(absent, facts) == [
        ("account old", "error", "refused: remove account old: the default account of user(s) gina (give them "
         "another default_account, or remove them)", [])]
    # gina moved to ml in the same change: her old association goes first, then the account
    moved = {**absent, "users": [{"name": "gina", "default_account": "ml"}]}
    planned = changes(moved, facts)
    assert [(r, a) for r, a, _, _ in planned] == [("user gina", "update"), ("account old", "delete")]
    assert planned[0][3] == ["sacctmgr -i modify user where name=gina set DefaultAccount=ml",
                             "sacctmgr -i remove user where name=gina account=old cluster=rt"]
    assert planned[1][3] == ["sacctmgr -i remove account where name=old"]
    gone = {**absent, "users": [{"name": "gina", "default_account": "old", "state": "absent"}]}
    assert [(r, a) for r, a, _, _ in changes(gone, facts)] == [("user gina", "delete"), ("account old", "delete")]
