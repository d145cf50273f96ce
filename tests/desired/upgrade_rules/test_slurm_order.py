"""Slurm upgrades at plan time, from package facts (recorded 22.05 dpkg stanzas, synthetic later releases): the
order slurmdbd (after its backup) -> controllers -> slurmd as phases and scope on the package transactions, and
the refusals naming the rule (release window, slurmd newer than slurmctld, slurmdbd backup, release downgrade)."""

from __future__ import annotations

from pathlib import Path

from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.drivers.slurm_upgrade import BACKUP_PHASE, CTLD_PHASE, DBD_PHASE, SLURMD_PHASE
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import Change, Plan
from reconciler.engine.report import render_text
from tests.desired.upgrade_rules.slurm_state import DEBIAN_2205, packages_yaml, plan_for
from tests.drivers.base_state import write_state

BACKUP = "mysqldump slurm_acct_db > /var/backups/acct.sql"
ALL = ("cpu01", "ctl", "gpu01", "gpu02")


def everywhere(version: str) -> dict[str, str]:
    """Every node at VERSION."""
    return dict.fromkeys(ALL, version)


def moved(plan: Plan) -> dict[str, Change]:
    """The package transactions by node."""
    return {c.node: c for c in plan.changing() if c.driver == "packages"}


def test_23_11_to_24_11_is_ordered_dbd_controllers_slurmd(tmp_path: Path) -> None:
    """Allowed (24.11 takes over from 23.11): the backup first on cpu01, then slurmdbd, then the controller, then
    slurmd; slurmdbd and the controller cluster-wide (one gated wave), slurmd node by node."""
    plan = plan_for(tmp_path, everywhere("24.11.1-1"), everywhere("23.11.10-1"), ["24.11.1-1", "23.11.10-1"],
                    backup=BACKUP)
    assert plan.errors == []
    changes = moved(plan)
    assert (changes["cpu01"].phase, changes["ctl"].phase) == (DBD_PHASE, CTLD_PHASE)
    assert changes["gpu01"].phase == changes["gpu02"].phase == SLURMD_PHASE
    assert BACKUP_PHASE < DBD_PHASE < CTLD_PHASE < SLURMD_PHASE
    assert (changes["cpu01"].scope, changes["ctl"].scope, changes["gpu01"].scope) == ("lead", "lead", "node")
    backup = [c for c in plan.changing() if c.driver == "slurm-upgrade"]
    assert [(c.node, c.phase, c.resource) for c in backup] == [("cpu01", BACKUP_PHASE, "slurmdbd backup")]
    assert [op.command for op in backup[0].ops if isinstance(op, RunCommand)] == ["supervisorctl stop slurmdbd", BACKUP]
    assert "slurmdbd 23.11.10-1 → 24.11.1-1" in backup[0].summary
    assert "slurmdbd backup" in render_text(plan)


def test_22_05_to_24_11_is_refused_naming_the_rule(tmp_path: Path) -> None:
    """22.05 (recorded Debian 12 stanzas) straight to 24.11: outside Slurm's window; every Slurm transaction an
    error naming the rule and the way through (23.11 first); nothing of it is left to apply."""
    plan = plan_for(tmp_path, everywhere("24.11.1-1"), everywhere(DEBIAN_2205), ["24.11.1-1", DEBIAN_2205],
                    backup=BACKUP)
    changes = [c for c in plan.changes if c.driver == "packages" and c.action != "ok"]
    assert {c.node for c in changes} == set(ALL) and {c.action for c in changes} == {"error"}
    assert not any(c.ops for c in changes) and not [c for c in plan.changing() if c.driver == "slurm-upgrade"]
    summary = changes[0].summary
    assert "rule slurm-release-window" in summary and "22.05 → 24.11" in summary, summary
    assert "24.05, 23.11, 23.02 only" in summary and "upgrade to 23.11 first" in summary, summary
    assert len(plan.errors) == 4 and "rule slurm-release-window" in render_text(plan)


def test_slurmd_newer_than_slurmctld_is_refused(tmp_path: Path) -> None:
    """slurmctld left unpinned at 23.11 while slurmd moves to 24.11: refused at plan time (the pinned case is
    the loader's, below)."""
    versions = {"cpu01": "24.11.1-1", "ctl": "present", "gpu01": "24.11.1-1", "gpu02": "24.11.1-1"}
    installed = {"cpu01": "24.11.1-1", "ctl": "23.11.10-1", "gpu01": "23.11.10-1", "gpu02": "23.11.10-1"}
    plan = plan_for(tmp_path, versions, installed, ["24.11.1-1", "23.11.10-1"])
    refused = {c.node: c.summary for c in plan.changes if c.driver == "packages" and c.action == "error"}
    assert set(refused) == {"gpu01", "gpu02"}, refused
    assert "slurmd 24.11 on gpu[01-02]" in refused["gpu01"] and "slurmctld 23.11 on ctl" in refused["gpu01"]
    assert "rule slurmd-not-newer-than-slurmctld" in refused["gpu01"]


def test_slurmd_newer_than_pinned_slurmctld_is_a_load_error(tmp_path: Path) -> None:
    """Both pinned: the desired state alone is wrong, refused at validate with the slurmd package's line."""
    versions = {"cpu01": "24.11.1-1", "ctl": "23.11.10-1", "gpu01": "24.11.1-1", "gpu02": "24.11.1-1"}
    root = write_state(tmp_path / "repo", packages_yaml(versions))
    try:
        load_dir(root)
        raise AssertionError("loaded")
    except DesiredStateError as exc:
        got = [f"{e.location.file}:{e.location.line} {e.key_path()}: {e.message}" for e in exc.errors
               if e.location]
    assert len(got) == 4, got  # slurmd and the commands of gpu01 and gpu02; not cpu01's commands (with slurmdbd)
    slurmd = [g for g in got if ".packages.slurmd:" in g]
    assert slurmd and slurmd[0].startswith("files.yaml:15 packages[2].packages.slurmd:"), got
    assert "rule slurmd-not-newer-than-slurmctld" in slurmd[0] and "packages[1].packages.slurmctld" in slurmd[0]


def test_slurmdbd_release_change_needs_the_backup(tmp_path: Path) -> None:
    """No rollout.slurm_upgrade.backup: a slurmdbd release change is refused, naming the key to set."""
    plan = plan_for(tmp_path, everywhere("24.11.1-1"), everywhere("23.11.10-1"), ["24.11.1-1", "23.11.10-1"])
    refused = [c.summary for c in plan.changes if c.driver == "packages" and c.action == "error"]
    assert refused and "rule slurmdbd-backup-first" in refused[0] and "rollout.slurm_upgrade.backup" in refused[0]


def test_maintenance_release_needs_no_backup_and_keeps_the_order(tmp_path: Path) -> None:
    """24.11.1 -> 24.11.3: no release change, no backup step; the order still holds."""
    plan = plan_for(tmp_path, everywhere("24.11.3-1"), everywhere("24.11.1-1"), ["24.11.3-1", "24.11.1-1"])
    assert plan.errors == [] and not [c for c in plan.changing() if c.driver == "slurm-upgrade"]
    assert moved(plan)["cpu01"].phase < moved(plan)["ctl"].phase < moved(plan)["gpu01"].phase


def test_release_downgrade_is_refused(tmp_path: Path) -> None:
    """24.11 back to 23.11 (allow_downgrade set): Slurm cannot read newer state files: refused with the rule."""
    plan = plan_for(tmp_path, everywhere("23.11.10-1"), everywhere("24.11.1-1"), ["24.11.1-1", "23.11.10-1"],
                    backup=BACKUP)
    refused = [c.summary for c in plan.changes if c.driver == "packages" and c.action == "error"]
    assert refused and "rule slurm-no-release-downgrade" in refused[0]


def test_converged_cluster_plans_nothing(tmp_path: Path) -> None:
    """Everything at 24.11.1: no change, no backup, no error (applying twice changes nothing)."""
    plan = plan_for(tmp_path, everywhere("24.11.1-1"), everywhere("24.11.1-1"), ["24.11.1-1"], backup=BACKUP)
    assert plan.errors == [] and plan.changing() == []


def test_controllers_first_in_one_commit_then_slurmd_alone(tmp_path: Path) -> None:
    """The second commit of a split upgrade: slurmdbd and controllers already at 24.11, slurmd 23.11 -> 24.11:
    only slurmd moves, node scope (the usual waves), no backup."""
    installed = {"cpu01": "24.11.1-1", "ctl": "24.11.1-1", "gpu01": "23.11.10-1", "gpu02": "23.11.10-1"}
    plan = plan_for(tmp_path, everywhere("24.11.1-1"), installed, ["24.11.1-1", "23.11.10-1"])
    assert plan.errors == [] and sorted(moved(plan)) == ["gpu01", "gpu02"]
    assert {c.scope for c in moved(plan).values()} == {"node"}
