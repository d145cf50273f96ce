"""An interrupted Slurm upgrade at plan time: a daemon whose package already moved but which still runs the old
release (or a replaced binary, or not at all) is owed its restart, in its phase, and the release rules judge the
version in effect, not the installed one. Facts as the testbed showed them after a daemon killed mid-upgrade
(tests/rollout/test_slurm_major_upgrade_testbed.py): `pgrep` + `/proc/PID/exe` ending `(deleted)`, and the
versions slurmctld and slurmdbd answer with."""

from __future__ import annotations

import re
from pathlib import Path

from reconciler.desired.loader import load_dir
from reconciler.drivers import slurm_running
from reconciler.drivers.node_state import NodeStateDriver
from reconciler.drivers.slurm_upgrade import CTLD_PHASE, DBD_PHASE, SLURMD_PHASE
from reconciler.engine.context import Context
from reconciler.engine.plan import Plan
from reconciler.engine.planner import make_plan, plan_followups
from reconciler.engine.report import render_text
from reconciler.engine.review import apply_edits
from reconciler.facts.models import ClusterFacts, NodeFacts
from reconciler.facts.parsers import parse_scontrol_nodes
from tests.desired.upgrade_rules.slurm_state import packages_yaml, plan_for, state_for
from tests.drivers.base_state import write_state

OLD, NEW = "24.11.5-4+deb13u1", "26.05.5-1"
BACKUP = "mysqldump slurm_acct_db > /var/backups/acct.sql"


def owed(plan: Plan) -> dict[str, str]:
    """The owed restarts by node: their resource."""
    return {c.node: c.resource for c in plan.changing() if c.driver == slurm_running.DRIVER
            and c.resource.startswith("restart ")}


def test_parse_reads_running_replaced_and_answered_versions() -> None:
    """The fact's own output: which daemons run, which on a replaced binary, which versions they answer with."""
    found = slurm_running.parse("running slurmdbd\nreplaced slurmctld\nversion slurmdbd 26.05.5\nnoise\n"
                                "version slurmd 1.2\n")
    assert found.running == {"slurmdbd", "slurmctld"} and found.replaced == {"slurmctld"}
    assert found.versions == {"slurmdbd": "26.05.5"}  # slurmd's comes from Slurm's node view, not from here
    assert found.to_json() == {"running": ["slurmctld", "slurmdbd"], "replaced": ["slurmctld"],
                               "versions": {"slurmdbd": "26.05.5"}}  # sorted: the facts' fingerprint is stable
    text = slurm_running.command({"slurmctld", "slurmd"})
    assert "pgrep -xo slurmctld" in text and "SLURM_VERSION" in text and "sacctmgr" not in text


def test_slurmctld_left_on_the_old_release_is_restarted_before_any_slurmd(tmp_path: Path) -> None:
    """slurmdbd and slurmctld's packages moved (one node's transaction) but slurmctld still runs 24.11: the plan
    restarts it (archiving StateSaveLocation) in the controllers' phase, before the slurmd transactions."""
    everywhere = dict.fromkeys(("cpu01", "ctl", "gpu01", "gpu02"), NEW)
    installed = {"cpu01": NEW, "ctl": NEW, "gpu01": OLD, "gpu02": OLD}
    plan = plan_for(tmp_path, everywhere, installed, [OLD, NEW], backup=BACKUP,
                    running={"cpu01": "running slurmdbd\nversion slurmdbd 26.05.5\n",
                             "ctl": "replaced slurmctld\nversion slurmctld 24.11.5\n"})
    assert plan.errors == [], plan.errors
    assert owed(plan) == {"ctl": "restart slurmctld"}, owed(plan)
    restart = next(c for c in plan.changing() if c.node == "ctl")
    assert (restart.phase, restart.scope) == (CTLD_PHASE, "lead")
    assert "slurmctld runs 24.11.5 while slurmctld 26.05.5-1 is installed" in restart.summary, restart.summary
    assert "StateSaveLocation archived" in restart.summary
    assert all(c.phase == SLURMD_PHASE for c in plan.changing() if c.node.startswith("gpu"))
    assert not [c for c in plan.changing() if c.resource == "slurmdbd backup"]  # slurmdbd is done: no backup
    assert restart.restore is not None and restart.restore.missing  # never "undone" by a rollback
    assert "restart slurmctld" in render_text(plan)


def test_rules_judge_the_running_release(tmp_path: Path) -> None:
    """With slurmctld running 24.11 from a replaced binary and no way to restart it in this plan (slurmctld not
    named for the controller), slurmd 26.05 is refused: the version in effect is 24.11, not the installed 26.05."""
    installed = {"cpu01": NEW, "ctl": NEW, "gpu01": OLD, "gpu02": OLD}
    versions = {"cpu01": NEW, "ctl": NEW, "gpu01": NEW, "gpu02": NEW}
    plan = plan_for(tmp_path, versions, installed, [OLD, NEW], backup=BACKUP,
                    running={"ctl": "replaced slurmctld\nversion slurmctld 24.11.5\n"})
    assert plan.errors == [], plan.errors  # its owed restart leads, so slurmd may follow
    assert owed(plan) == {"ctl": "restart slurmctld"}
    slurmd_first = plan_for(tmp_path / "b", {**versions, "ctl": NEW}, installed, [OLD, NEW], backup=BACKUP,
                            running={"ctl": "running slurmctld\nversion slurmctld 24.11.5\n"})
    # the same, from a version answered rather than a replaced binary
    assert owed(slurmd_first) == {"ctl": "restart slurmctld"}


def test_nothing_owed_when_the_daemons_run_what_is_installed(tmp_path: Path) -> None:
    """Everything at 26.05 and running it (or slurmd stopped by someone): no change at all."""
    everywhere = dict.fromkeys(("cpu01", "ctl", "gpu01", "gpu02"), NEW)
    plan = plan_for(tmp_path, everywhere, everywhere, [OLD, NEW], backup=BACKUP,
                    running={"cpu01": "running slurmdbd\nversion slurmdbd 26.05.5\n",
                             "ctl": "running slurmctld\nversion slurmctld 26.05.5\n", "gpu01": "", "gpu02": ""})
    assert not plan.has_changes and plan.errors == [], render_text(plan)


def test_slurmdbd_stopped_after_its_package_moved_is_started_in_its_phase(tmp_path: Path) -> None:
    """Killed between slurmdbd's transaction and its start (or during its conversion): slurmdbd is not running
    with 26.05 installed; the plan starts it (waiting for its conversion) in slurmdbd's phase, and does not back
    the database up again (the interrupted run's backup stands; a second one could overwrite it with a database
    half converted)."""
    everywhere = dict.fromkeys(("cpu01", "ctl", "gpu01", "gpu02"), NEW)
    installed = {"cpu01": NEW, "ctl": OLD, "gpu01": OLD, "gpu02": OLD}
    plan = plan_for(tmp_path, everywhere, installed, [OLD, NEW], backup=BACKUP,
                    running={"cpu01": "", "ctl": "running slurmctld\nversion slurmctld 24.11.5\n"})
    assert plan.errors == [], plan.errors
    start = next(c for c in plan.changing() if c.node == "cpu01" and c.driver == slurm_running.DRIVER
                 and c.resource != "slurmdbd backup")
    assert start.phase == DBD_PHASE and "slurmdbd is not running while slurmdbd 26.05.5-1 is installed" in \
        start.summary, start.summary
    assert any("wait for slurmdbd 26.05.5" in op.description for op in start.ops), start.ops  # type: ignore[union-attr]
    assert not [c for c in plan.changing() if c.resource == "slurmdbd backup"]


def test_slurms_view_unavailable_is_a_warning_when_the_plan_restarts_slurmctld_first(tmp_path: Path) -> None:
    """The controller's commands moved with slurmdbd's packages and get `Protocol authentication error` from the
    24.11 slurmctld still running (seen on the testbed): node states cannot be planned, which is an error, unless
    this plan restarts that slurmctld first (then a warning saying so); without the owed restart it stays an error."""
    everywhere = dict.fromkeys(("cpu01", "ctl", "gpu01", "gpu02"), NEW)
    for replaced, where in ((True, "warnings"), (False, "errors")):
        plan = plan_for(tmp_path / where, everywhere, everywhere, [OLD, NEW], backup=BACKUP,
                        running={"ctl": "replaced slurmctld\n" if replaced else "running slurmctld\n"})
        context = Context(loaded=load_dir(write_state(tmp_path / f"{where}-repo", packages_yaml(everywhere, BACKUP))),
                          source="test")
        context.facts = ClusterFacts(controller=context.controller, slurm_view_error="scontrol failed: "
                                     "slurm_load_node error: Protocol authentication error")
        apply_edits(plan, NodeStateDriver().review(context, plan))
        said = [m for m in getattr(plan, where) if "Slurm's view unavailable" in m]
        assert len(said) == 1, (plan.errors, plan.warnings)
        assert ("this plan restarts slurmctld first" in said[0]) == replaced, said


def test_a_pending_reboots_drain_with_our_old_reason_is_not_resumed(tmp_path: Path) -> None:
    """24.11 keeps a resumed node's last Reason until a job starts; an admin's `scontrol reboot ASAP` then drains it
    under our old reason with NextState=UNDRAIN (the recorded 24.11 `reboot` scene, its reason swapped for the
    rolling restart's). The node-state driver leaves it to Slurm instead of resuming it (which would cancel the
    reboot); the same line without NextState is resumed as before."""
    line = next(row for row in (Path(__file__).parents[2] / "fixtures" / "slurm_tools" / "24.11" /
                                "reboot.scontrol_show_node_o.txt").read_text().splitlines() if "NodeName=gpu01 " in row)
    assert "NextState=UNDRAIN" in line and "REBOOT_REQUESTED" in line
    ours = re.sub(r"Reason=.*$", "Reason=reconciler: rolling restart of slurmd [root@2026-11-26T13:15:21]", line)
    context = Context(loaded=load_dir(write_state(tmp_path / "repo", "")), source="test")
    for text, resumes in ((ours, False), (ours.replace(" NextState=UNDRAIN", ""), True)):
        context.facts = ClusterFacts(controller=context.controller, slurm_nodes=parse_scontrol_nodes(text))
        change = next(c for c in NodeStateDriver().plan(context, context.controller, NodeFacts(node="ctl", reachable=True))
                      if c.node == "gpu01")
        assert (change.action == "update") == resumes, change
        if not resumes:
            assert "pending reboot (NextState=UNDRAIN)" in change.summary, change.summary


def test_a_stopped_slurmd_is_upgraded_but_not_started(tmp_path: Path) -> None:
    """slurmd's package moves on a node where slurmd does not run (stopped by someone, or a login node carrying the
    package): the transaction goes ahead, slurmd is not started; where it runs it is restarted and waited for."""
    everywhere = dict.fromkeys(("cpu01", "ctl", "gpu01", "gpu02"), NEW)
    installed = {"cpu01": NEW, "ctl": NEW, "gpu01": OLD, "gpu02": OLD}
    plan = plan_for(tmp_path, everywhere, installed, [OLD, NEW], backup=BACKUP,
                    running={"cpu01": "running slurmdbd\nversion slurmdbd 26.05.5\n",
                             "ctl": "running slurmctld\nversion slurmctld 26.05.5\n",
                             "gpu01": "", "gpu02": "running slurmd\n"})
    moves = {c.node: c for c in plan.changing() if c.driver == "packages"}
    assert "slurmd is not running there: not started" in moves["gpu01"].summary, moves["gpu01"].summary
    assert not any("slurmd" in op.description and "restart" in op.description for op in moves["gpu01"].ops)
    assert any(op.description == "restart slurmd" for op in moves["gpu02"].ops), moves["gpu02"].ops


def test_followups_asked_again_leave_the_reviewed_plan_as_it_was(tmp_path: Path) -> None:
    """A pull request's plan asks for the follow-ups a second time, after marking the changes it has no facts for
    (forge/pr_planning.py). The Slurm upgrade's review (its order, each transaction wrapped in its daemons' steps,
    the backup added) is not made again: while it was a followups hook that edited the plan, that second pass
    wrapped every transaction once more (issue 45 item 7)."""
    everywhere = dict.fromkeys(("cpu01", "ctl", "gpu01", "gpu02"), NEW)
    ctx, drivers = state_for(tmp_path, everywhere, dict.fromkeys(everywhere, OLD), [OLD, NEW], backup=BACKUP)
    plan = make_plan(ctx, drivers)

    def shape() -> list[tuple[str, str, int, list[str]]]:
        return [(c.node, c.resource, c.phase, [op.description for op in c.ops]) for c in plan.changes]

    first = shape()
    assert any("wait for slurmctld" in " ".join(ops) for _, _, _, ops in first)  # wrapped once, by the review
    assert [r for _, r, _, _ in first].count("slurmdbd backup") == 1
    plan.followups = plan_followups(ctx, plan, drivers)
    assert shape() == first
