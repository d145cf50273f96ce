"""Reservation mode and requeue of the upgrade machine (reconciler/rollout/reservation.py) over a real local shell
and the STAND-IN cluster of files (tests/rollout/upgrade_sim.py), with a stand-in reservation: a file the test
"starts". What the real Slurm does with the same commands is tests/rollout/test_upgrade_reservation_testbed.py."""

from __future__ import annotations

import shlex
import threading
from pathlib import Path

from reconciler.engine.drain import DrainSteps
from reconciler.rollout.journal import NodeEntry
from tests.rollout.test_upgrade import BOUND, FORWARD, entry, poll, states
from tests.rollout.upgrade_sim import NEW, OLD, REASON, FileJournal, Sim

START = "2030-01-07T10:00:00"


class ReservedSim(Sim):
    """The file cluster with a stand-in reservation per node (`res`, `res_active`), jobs as `ID PARTITION` lines,
    the partition `batch` requeued (each requeue step counted in `requeues`), and every reservation, drain and
    resume step written to `order`."""

    def steps(self, node: str) -> DrainSteps:
        """The stand-in's steps with the reservation mode's and the requeue's."""
        d = shlex.quote(str(self.dir(node)))
        base = super().steps(node)
        return base.model_copy(update={
            "drain": f"{base.drain}; echo drain >> {d}/order",
            "resume": f"{base.resume}; echo resume >> {d}/order",
            "reserve": (f"if test -e {d}/noend; then echo 'drain: a job on {node} has no time limit'; exit 0; fi; "
                        f"test -e {d}/res || {{ echo x >> {d}/reserves; echo reserve >> {d}/order; "
                        f"echo 'reconciler-upgrade-{node} {START}' > {d}/res; }}; cat {d}/res"),
            "reserved": f"test -e {d}/res_active",
            "unreserve": (f"if test -e {d}/unreserve_fails; then echo 'Error deleting the reservation'; exit 1; fi;"
                          f" test ! -e {d}/res || {{ rm -f {d}/res; echo unreserve >> {d}/order; }}"),
            "kept_jobs": f"awk '$2 != \"batch\"' {d}/jobs",
            "requeue": (f"awk '$2 == \"batch\" {{print \"requeued \" $1}}' {d}/jobs; "
                        f"awk '$2 != \"batch\"' {d}/jobs > {d}/jobs.tmp; mv {d}/jobs.tmp {d}/jobs; "
                        f"echo x >> {d}/requeues")})


CONFIG = {"mode": "reservation", "requeue": ["batch"], "drain_timeout": "1m"}


def node_entry(journal: FileJournal, node: str) -> NodeEntry | None:
    """NODE's entry in the journal as stored."""
    return entry(journal.load(), node)


def test_a_reserved_node_keeps_running_jobs_until_its_reservation_starts_then_is_drained_and_upgraded(
        tmp_path: Path) -> None:
    """The reservation is made (journalled) and the node is NOT drained while its job runs and the reservation has
    not started; at the start it is drained, its job waited for (never ended), upgraded; the reservation is
    deleted after the gates and before the resume."""
    sim = ReservedSim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "jobs").write_text("4711 debug\n")
    journal = FileJournal(tmp_path / "journal.json")
    machine = sim.machine(CONFIG, journal)
    thread = threading.Thread(target=machine.run, args=(["n1"],))
    thread.start()
    poll("n1 reserved and waiting", lambda: (e := node_entry(journal, "n1")) is not None
         and e.state == "waiting-for-jobs" and e.reservation == "reconciler-upgrade-n1" and e.jobs == 1)
    found = node_entry(journal, "n1")
    assert found is not None and found.reservation_start == START and found.reserved_at is not None
    assert sim.read("n1", "drained") == ""  # jobs may still start on it until the reservation starts
    (sim.dir("n1") / "res_active").touch()  # the reservation starts; the job still runs
    # drained, then its batch jobs requeued: the stand-in's requeue rewrites `jobs`, so the job ends only after it
    # (ended before, CI saw the rewrite bring it back: the node waited out drain_timeout)
    poll("n1 drained at the start and requeued", lambda: sim.read("n1", "drained") == REASON
         and sim.count("n1", "requeues") == 1)
    assert sim.count("n1", "reboots") == 0  # its job still runs: waited for
    (sim.dir("n1") / "jobs").write_text("")
    thread.join(BOUND)
    assert not thread.is_alive()
    assert sim.read("n1", "loaded") == NEW and states(journal, "n1") == FORWARD
    assert sim.read("n1", "order").split() == ["reserve", "drain", "unreserve", "resume"]
    done = node_entry(journal, "n1")
    assert done is not None and done.reservation is None and sim.count("n1", "reserves") == 1


def test_a_node_whose_waited_jobs_ended_goes_before_the_start_and_only_requeue_partitions_are_requeued(
        tmp_path: Path) -> None:
    """Only a `batch` job left (requeue: [batch]): the node is drained before its reservation starts, the batch job
    is requeued (journalled), the debug job it had was waited for and never requeued."""
    sim = ReservedSim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "jobs").write_text("11 debug\n12 batch\n")
    journal = FileJournal(tmp_path / "journal.json")
    thread = threading.Thread(target=sim.machine(CONFIG, journal).run, args=(["n1"],))
    thread.start()
    poll("n1 reserved", lambda: (e := node_entry(journal, "n1")) is not None and e.reservation is not None)
    assert sim.read("n1", "drained") == "" and sim.read("n1", "jobs").split() == ["11", "debug", "12", "batch"]
    (sim.dir("n1") / "jobs").write_text("12 batch\n")  # the debug job ends by itself
    thread.join(BOUND)
    assert not thread.is_alive()
    done = node_entry(journal, "n1")
    assert done is not None and done.requeued == ["12"] and done.state == "done"
    assert not (sim.dir("n1") / "res_active").exists()  # it never started: taken before
    assert sim.read("n1", "order").split() == ["reserve", "drain", "unreserve", "resume"]


def test_drain_mode_requeues_the_listed_partitions_jobs_and_waits_for_the_others(tmp_path: Path) -> None:
    """mode drain (the default) with requeue: drained at once, the batch job requeued, the debug job waited for."""
    sim = ReservedSim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "jobs").write_text("21 batch\n22 debug\n")
    journal = FileJournal(tmp_path / "journal.json")
    thread = threading.Thread(target=sim.machine({"requeue": ["batch"]}, journal).run, args=(["n1"],))
    thread.start()
    poll("n1 drained, its debug job left", lambda: sim.read("n1", "jobs") == "22 debug"
         and (e := node_entry(journal, "n1")) is not None and e.requeued == ["21"])
    assert sim.count("n1", "reboots") == 0 and sim.count("n1", "reserves") == 0
    (sim.dir("n1") / "jobs").write_text("")
    thread.join(BOUND)
    assert not thread.is_alive() and sim.read("n1", "order").split() == ["drain", "resume"]


def test_a_job_without_an_end_time_drains_the_node_as_drain_mode_does(tmp_path: Path) -> None:
    sim = ReservedSim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "noend").touch()
    logged: list[str] = []
    machine = sim.machine(CONFIG, FileJournal(tmp_path / "journal.json"))
    machine.taking.log = logged.append
    outcome = machine.run(["n1"])
    assert outcome.done == ["n1"] and sim.read("n1", "order").split() == ["drain", "resume"]
    assert "upgrade: n1: no reservation, drained instead: a job on n1 has no time limit" in logged


def test_a_reservation_that_cannot_be_deleted_fails_the_node_which_stays_drained(tmp_path: Path) -> None:
    """Left behind, the reservation would keep every job off the resumed node: the node fails, drained, says why."""
    sim = ReservedSim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "unreserve_fails").touch()
    outcome = sim.machine({**CONFIG, "failure_budget": 1}, FileJournal(tmp_path / "journal.json")).run(["n1"])
    assert "reservation reconciler-upgrade-n1 not deleted: Error deleting the reservation" in outcome.failed["n1"]
    assert sim.read("n1", "drained").startswith(f"{REASON} failed: reservation") and sim.count("n1", "resumes") == 0


def test_a_restarted_machine_finds_its_reservation_and_makes_no_second(tmp_path: Path) -> None:
    sim = ReservedSim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "jobs").write_text("31 debug\n")
    journal = FileJournal(tmp_path / "journal.json")
    stop = threading.Event()
    first = sim.machine(CONFIG, journal)
    first.should_stop = first.taking.should_stop = stop.is_set
    thread = threading.Thread(target=first.run, args=(["n1"],))
    thread.start()
    poll("n1 reserved", lambda: (e := node_entry(journal, "n1")) is not None and e.state == "waiting-for-jobs"
         and e.reservation is not None)
    stop.set()
    thread.join(BOUND)
    assert not thread.is_alive()
    stopped = node_entry(journal, "n1")
    assert stopped is not None and stopped.state == "waiting-for-jobs" and sim.read("n1", "drained") == ""
    (sim.dir("n1") / "jobs").write_text("")
    record = journal.load()
    assert record is not None
    outcome = sim.machine(CONFIG, journal, record=record).run(["n1"])
    assert outcome.done == ["n1"] and sim.count("n1", "reserves") == 1
    assert sim.read("n1", "order").split() == ["reserve", "drain", "unreserve", "resume"]


def test_a_stop_while_jobs_still_run_leaves_the_node_waiting_not_applying(tmp_path: Path) -> None:
    """Before, a stop asked during the wait moved the node to `applying` with its job still running, and the next
    start applied and rebooted under the job."""
    sim = Sim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "jobs").write_text("4711\n")
    journal = FileJournal(tmp_path / "journal.json")
    stop = threading.Event()
    machine = sim.machine({}, journal)
    machine.should_stop = stop.is_set
    thread = threading.Thread(target=machine.run, args=(["n1"],))
    thread.start()
    poll("n1 waiting", lambda: (e := node_entry(journal, "n1")) is not None and e.state == "waiting-for-jobs")
    stop.set()
    thread.join(BOUND)
    assert not thread.is_alive()
    assert states(journal, "n1")[-1] == "waiting-for-jobs"
    assert (sim.read("n1", "version"), sim.count("n1", "reboots")) == (OLD, 0)
