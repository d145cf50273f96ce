"""The accounting planner, pure: facts (the database as sacctmgr shows it) + desired state -> sacctmgr commands.

Operation cases in the pyinfra style: each names the facts, the desired `accounting:` and the exact commands.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.drivers.accounting import Planner
from reconciler.drivers.accounting_facts import AccountingFacts, Assoc, Job, Qos, minutes, tres
from reconciler.model import Accounting

CLUSTER, CTL = "rt", "ctl"


def root_only() -> AccountingFacts:
    """A fresh database: the root account, the root user and the normal QOS."""
    return AccountingFacts(
        qos={"normal": Qos(name="normal", description="Normal QOS default")},
        accounts={"root": ("default root account", "root")},
        assocs=[Assoc("root", "", "", "1", ["normal"], "", {}), Assoc("root", "root", "", "1", ["normal"], "", {})],
        users={"root": ("root", "Administrator")})


def plan(desired: dict[str, Any], facts: AccountingFacts) -> list[tuple[str, str, list[str]]]:
    """(resource, action, commands) of every change."""
    changes = Planner(Accounting(**desired), facts, CLUSTER, CTL).plan()
    return [(c.resource, c.action, [op.command for op in c.ops]) for c in changes]  # type: ignore[union-attr]


def converged() -> AccountingFacts:
    """What sacctmgr shows after DESIRED below was applied."""
    facts = root_only()
    facts.qos["high"] = Qos(name="high", description="high", priority=100,
                            limits={"MaxTRESPerUser": "gres/gpu=8", "MaxWall": ""})
    facts.accounts.update({"ml": ("machine learning", "research"), "ml-vision": ("ml-vision", "research")})
    facts.assocs += [Assoc("ml", "", "root", "10", ["high", "normal"], "", {"MaxWall": "00:10:00",
                                                                           "GrpTRES": "gres/gpu=16"}),
                     Assoc("ml-vision", "", "ml", "2", ["high", "normal"], "", {}),
                     Assoc("ml", "alice", "", "1", ["high", "normal"], "", {}),
                     Assoc("ml-vision", "alice", "", "1", ["high", "normal"], "", {}),
                     Assoc("ml-vision", "bob", "", "1", ["high", "normal"], "", {})]
    facts.users.update({"alice": ("ml", "None"), "bob": ("ml-vision", "None")})
    return facts


DESIRED: dict[str, Any] = {
    "qos": [{"name": "high", "priority": 100, "limits": {"MaxTRESPerUser": "gres/gpu=8"}}],
    "accounts": [{"name": "ml-vision", "parent": "ml", "fairshare": 2},
                 {"name": "ml", "description": "machine learning", "organization": "research", "fairshare": 10,
                  "qos": ["normal", "high"], "limits": {"MaxWall": "10", "GrpTRES": "gres/gpu=16"}}],
    "users": [{"name": "bob", "default_account": "ml-vision"},
              {"name": "alice", "default_account": "ml", "accounts": ["ml-vision"]}],
}


def test_from_an_empty_database_everything_is_created_in_dependency_order() -> None:
    assert plan(DESIRED, root_only()) == [
        ("qos high", "create", ["sacctmgr -i add qos high Priority=100 MaxTRESPerUser=gres/gpu=8"]),
        ("account ml", "create", ["sacctmgr -i add account ml cluster=rt 'Description=machine learning' "
                                  "Organization=research Parent=root Fairshare=10 QOS=high,normal "
                                  "GrpTRES=gres/gpu=16 MaxWall=10"]),
        ("account ml-vision", "create", ["sacctmgr -i add account ml-vision cluster=rt Parent=ml Fairshare=2"]),
        ("user alice", "create", ["sacctmgr -i add user alice Account=ml DefaultAccount=ml cluster=rt",
                                  "sacctmgr -i add user alice Account=ml-vision cluster=rt"]),
        ("user bob", "create", ["sacctmgr -i add user bob Account=ml-vision DefaultAccount=ml-vision cluster=rt"]),
    ]


def test_converged_database_plans_nothing_even_with_equivalent_spellings() -> None:
    """MaxWall 10 (minutes) is sacctmgr's 00:10:00; QOS lists compare as sets."""
    assert plan(DESIRED, converged()) == []


def test_a_hand_edit_is_one_update_with_a_diff() -> None:
    facts = converged()
    facts.assocs[2] = Assoc("ml", "", "root", "5", ["high", "normal"], "", {"MaxWall": "00:10:00",
                                                                           "GrpTRES": "gres/gpu=16"})
    changes = Planner(Accounting(**DESIRED), facts, CLUSTER, CTL).plan()
    [change] = changes
    assert change.summary == "update account ml: fairshare 5 -> 10"
    assert [op.command for op in change.ops] == [  # type: ignore[union-attr]
        "sacctmgr -i modify account where name=ml cluster=rt set Fairshare=10"]
    assert "-fairshare: 5\n+fairshare: 10\n" in (change.diff or "")


def test_unset_fields_and_unnamed_entities_are_left_alone_without_prune() -> None:
    facts = converged()
    facts.users["carol"] = ("ml", "None")
    facts.assocs.append(Assoc("ml", "carol", "", "1", [], "", {"MaxJobs": "4"}))
    facts.qos["high"].limits["GrpJobs"] = "50"  # not in the desired state: not managed
    assert plan(DESIRED, facts) == []
    pruned = plan({**DESIRED, "prune": True}, facts)
    assert pruned == [("user carol", "delete", ["sacctmgr -i remove user where name=carol"])]


def test_removal_with_jobs_is_refused_naming_them_unless_forced() -> None:
    facts = converged()
    facts.jobs = [Job("41", "bob", "ml-vision", "RUNNING"), Job("42", "alice", "ml", "PENDING")]
    desired = {**DESIRED, "users": [DESIRED["users"][1], {"name": "bob", "default_account": "ml-vision",
                                                           "state": "absent"}]}
    changes = Planner(Accounting(**desired), facts, CLUSTER, CTL).plan()
    [refusal] = changes
    assert refusal.action == "error" and refusal.ops == []
    assert refusal.summary == ("refused: remove user bob: pending or running jobs 41 (running, bob) "
                               "(wait for them, or set accounting.force_remove)")
    forced = plan({**desired, "force_remove": True}, facts)
    assert forced == [("user bob", "delete", ["sacctmgr -i remove user where name=bob"])]
    facts.jobs = [Job("42", "alice", "ml", "PENDING")]
    assert plan(desired, facts) == [("user bob", "delete", ["sacctmgr -i remove user where name=bob"])]


def test_removing_an_account_checks_jobs_in_its_whole_subtree_and_goes_deepest_first() -> None:
    facts = converged()
    facts.jobs = [Job("7", "bob", "ml-vision", "RUNNING")]
    desired = {"accounts": [{"name": "ml", "state": "absent"}]}
    [refusal] = Planner(Accounting(**desired), facts, CLUSTER, CTL).plan()
    assert refusal.summary.startswith("refused: remove account ml: pending or running jobs 7 (running, bob)")
    facts.jobs = []
    pruned = Planner(Accounting(prune=True), facts, CLUSTER, CTL).plan()
    order = sorted(pruned, key=lambda c: c.phase)
    assert [c.resource for c in order] == ["user alice", "user bob", "account ml-vision", "account ml", "qos high"]


def test_user_moves_default_account_and_drops_an_association() -> None:
    facts = converged()
    desired = {**DESIRED, "users": [{"name": "alice", "default_account": "ml-vision", "admin_level": "Operator"},
                                    DESIRED["users"][0]]}
    assert plan(desired, facts) == [("user alice", "update", [
        "sacctmgr -i modify user where name=alice set DefaultAccount=ml-vision AdminLevel=Operator",
        "sacctmgr -i remove user where name=alice account=ml cluster=rt"])]


def test_qos_update_and_clearing_preemption() -> None:
    facts = converged()
    facts.qos["high"].preempt = ["normal"]
    desired = {**DESIRED, "qos": [{"name": "high", "priority": 200, "preempt": [],
                                   "limits": {"MaxTRESPerUser": "gres/gpu=4"}}]}
    [(resource, action, commands)] = plan(desired, facts)
    assert (resource, action) == ("qos high", "update")
    assert commands == ["sacctmgr -i modify qos where name=high set Priority=200 Preempt= MaxTRESPerUser=gres/gpu=4"]


@pytest.mark.parametrize("text,expected", [("10", 10), ("00:10:00", 10), ("1-00:00:00", 1440), ("2-12", 3600),
                                           ("30:00", 30), ("UNLIMITED", None), ("", None), ("-1", None)])
def test_time_limits_in_every_slurm_spelling(text: str, expected: int | None) -> None:
    assert minutes(text) == expected


def test_tres_lists_compare_in_any_order_and_unit() -> None:
    assert tres("gres/gpu=8,cpu=64") == tres("cpu=64,gres/gpu=8")
    assert tres("mem=1G") == tres("mem=1024M")
    assert tres("gres/gpu=-1") == {}
