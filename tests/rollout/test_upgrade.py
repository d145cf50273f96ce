"""The upgrade machine (reconciler/rollout/upgrade.py) over a real local shell and a STAND-IN cluster of files
(tests/rollout/upgrade_sim.py): state order, the journal written before each step, bounded waits, the failure
budget and rollback, and a SIGKILL at every step resumed from the journal (failpoints)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.common.failpoints import ENV
from reconciler.rollout.journal import NodeEntry, RolloutJournal
from tests.ha.local_shell import LocalShell
from tests.rollout.upgrade_sim import NEW, OLD, REASON, FileJournal, Sim

REPO = Path(__file__).resolve().parents[2]
FORWARD = ["upgrade-required", "draining", "waiting-for-jobs", "applying", "rebooting", "validating", "done"]
BOUND = 60.0


def poll(what: str, done: Callable[[], bool], timeout: float = BOUND) -> None:
    """Wait until DONE() holds, bounded."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.05)


def entry(record: RolloutJournal | None, node: str) -> NodeEntry | None:
    """NODE's upgrade entry in RECORD, if any."""
    return record.upgrade.nodes.get(node) if record is not None and record.upgrade is not None else None


def states(journal: FileJournal, node: str) -> list[str]:
    """NODE's states in the order the journal saw them (repeats folded)."""
    out: list[str] = []
    for save in journal.saves:
        found = entry(save, node)
        if found is not None and (not out or out[-1] != found.state):
            out.append(found.state)
    return out


class Events(LocalShell):
    """A local shell whose commands, and the journal's states, go into one ordered list."""

    def __init__(self, events: list[tuple[str, str]]) -> None:
        super().__init__()
        self.events = events

    def run(self, node: Any, command: str, **kw: Any) -> Any:
        self.events.append(("cmd", command))
        return super().run(node, command, **kw)


def test_states_in_order_each_journalled_before_its_step(tmp_path: Path) -> None:
    """upgrade-required -> draining -> waiting-for-jobs -> applying -> rebooting -> validating -> done; the drain,
    the apply, the reboot and the resume each run after the journal names their state; the node ends resumed
    once, rebooted once, on the new driver."""
    sim = Sim(tmp_path, ["n1"])
    sim.create()
    events: list[tuple[str, str]] = []
    journal = FileJournal(tmp_path / "journal.json")
    real_save = journal.save

    def save(journal: RolloutJournal) -> None:
        real_save(journal)
        assert journal.upgrade is not None
        events.append(("state", journal.upgrade.nodes["n1"].state))
    journal.save = save  # type: ignore[method-assign]
    outcome = sim.machine({"max_unavailable": 1}, journal, transport=Events(events)).run(["n1"])
    assert outcome.done == ["n1"] and not outcome.failed
    assert states(journal, "n1") == FORWARD

    def first(kind: str, text: str) -> int:
        return next(i for i, (k, v) in enumerate(events) if k == kind and text in v)
    assert first("state", "draining") < first("cmd", "> ") < first("state", "waiting-for-jobs")
    assert first("state", "applying") < first("cmd", f"echo {NEW} >") < first("state", "rebooting")
    assert first("state", "rebooting") < first("cmd", "/reboots") < first("state", "validating")
    assert first("state", "validating") < first("cmd", "/resumes") < first("state", "done")
    assert (sim.read("n1", "loaded"), sim.count("n1", "reboots"), sim.count("n1", "resumes")) == (NEW, 1, 1)
    assert sim.read("n1", "drained") == ""
    record = journal.load()
    assert record is not None and record.upgrade is not None and record.upgrade.max_unavailable == 1
    assert record.upgrade.work["n1"].undo == [f"echo {OLD} > {tmp_path / 'n1'}/version"]


def test_busy_node_reboots_only_after_its_jobs_end_and_idle_nodes_go_first(tmp_path: Path) -> None:
    """A node with a job is drained and waits (its job count journalled); it reboots once the job is gone; the idle
    node is upgraded first."""
    sim = Sim(tmp_path, ["n1", "n2"])
    sim.create()
    (sim.dir("n1") / "jobs").write_text("4711\n")
    journal = FileJournal(tmp_path / "journal.json")
    machine = sim.machine({"max_unavailable": 1}, journal)
    thread = threading.Thread(target=machine.run, args=(["n1", "n2"],))
    thread.start()
    def n1() -> NodeEntry | None:
        return entry(journal.load(), "n1")
    poll("n1 waiting for its job, counted",
         lambda: (e := n1()) is not None and e.state == "waiting-for-jobs" and e.jobs == 1)
    assert sim.count("n1", "reboots") == 0 and sim.read("n1", "drained") == REASON
    assert states(journal, "n2")[-1] == "done"  # the idle node went first
    (sim.dir("n1") / "jobs").write_text("")  # the job ends by itself
    thread.join(BOUND)
    assert not thread.is_alive()
    assert [sim.read(n, "loaded") for n in ("n1", "n2")] == [NEW, NEW]
    assert states(journal, "n1") == FORWARD


def test_jobs_past_drain_timeout_fail_the_node_which_stays_drained_untouched(tmp_path: Path) -> None:
    """drain_timeout bounds the wait: the node fails, nothing is applied or rebooted, it stays drained with why."""
    sim = Sim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "jobs").write_text("4711\n")
    journal = FileJournal(tmp_path / "journal.json")
    started = time.monotonic()
    outcome = sim.machine({"drain_timeout": "1s", "failure_budget": 1}, journal).run(["n1"])
    assert time.monotonic() - started < BOUND
    assert "jobs still running after drain_timeout 1s" in outcome.failed["n1"]
    assert (sim.read("n1", "version"), sim.count("n1", "reboots")) == (OLD, 0)
    assert sim.read("n1", "drained").startswith(f"{REASON} failed: jobs still running")
    assert states(journal, "n1")[-1] == "failed" and not outcome.over_budget


def test_node_not_back_within_reboot_timeout_fails(tmp_path: Path) -> None:
    """reboot_timeout bounds the wait for a new boot id: a reboot that never happens fails the node."""
    sim = Sim(tmp_path, ["n1"])
    sim.create()
    journal = FileJournal(tmp_path / "journal.json")
    machine = sim.machine({"reboot_timeout": "10s", "failure_budget": 1}, journal)
    never = sim.steps("n1").model_copy(update={"reboot": "true"})
    machine.hooks.steps = lambda node: never
    outcome = machine.run(["n1"])
    assert "not back within reboot_timeout 10s" in outcome.failed["n1"]
    assert sim.read("n1", "drained").startswith(f"{REASON} failed: not back")


def test_past_the_failure_budget_the_reached_nodes_are_rolled_back_and_no_other_touched(tmp_path: Path) -> None:
    """Budget 1: n2 fails and the upgrade goes on; n3 fails too: no new node starts, n1..n3 go back to the old
    driver (undo, reboot again), n1 (which had passed) is drained for it and resumed again, n2 and n3 stay drained with why; n4 untouched."""
    sim = Sim(tmp_path, ["n1", "n2", "n3", "n4"])
    sim.create(broken=("n2", "n3"))
    journal = FileJournal(tmp_path / "journal.json")
    outcome = sim.machine({"max_unavailable": 1, "failure_budget": 1}, journal).run(["n1", "n2", "n3", "n4"])
    assert outcome.over_budget and sorted(outcome.rolled_back) == ["n1", "n2", "n3"]
    assert "xid 79" in outcome.failed["n2"] and "xid 79" in outcome.failed["n3"]
    for node in ("n1", "n2", "n3"):
        assert (sim.read(node, "version"), sim.read(node, "loaded"), sim.count(node, "reboots")) == (OLD, OLD, 2)
        assert states(journal, node)[-2:] == ["rolling-back", "rolled-back"]
    # n1: resumed after its upgrade, drained again for its rollback (jobs may have landed), resumed after it
    assert sim.read("n1", "drained") == "" and sim.count("n1", "resumes") == 2
    for node in ("n2", "n3"):
        assert sim.read(node, "drained").startswith(f"{REASON} failed: gpu gate: gpu 0 xid 79")
        assert sim.read(node, "drained").endswith("; rolled back") and sim.count(node, "resumes") == 0
    assert (sim.read("n4", "version"), sim.read("n4", "drained"), sim.count("n4", "reboots")) == (OLD, "", 0)
    assert states(journal, "n4") == ["upgrade-required"]


class JobLands(LocalShell):
    """A local shell on which a job starts on NODE (resumed earlier) the moment LATER is drained."""

    def __init__(self, sim: Sim, node: str, later: str) -> None:
        super().__init__()
        self.sim, self.node, self.later = sim, node, later

    def run(self, node: Any, command: str, **kw: Any) -> Any:
        if command.endswith(f"> {self.sim.dir(self.later)}/drained") and command.startswith("echo "):
            (self.sim.dir(self.node) / "jobs").write_text("42 running\n")
        return super().run(node, command, **kw)


def test_a_passed_node_is_drained_and_its_jobs_waited_for_before_its_rollback(tmp_path: Path) -> None:
    """n1 passes and is resumed; a job lands on it; n2 fails past the budget: n1's rollback drains it and waits for
    the job (none is killed), here past drain_timeout: n1 is not rebooted again, stays on the new driver, drained."""
    sim = Sim(tmp_path, ["n1", "n2"])
    sim.create(broken=("n2",))
    journal = FileJournal(tmp_path / "journal.json")
    shell = JobLands(sim, "n1", "n2")
    outcome = sim.machine({"max_unavailable": 1, "failure_budget": 0, "drain_timeout": "1s"}, journal,
                          transport=shell).run(["n1", "n2"])
    assert outcome.over_budget and "xid 79" in outcome.failed["n2"]
    assert sim.read("n1", "jobs") == "42 running"  # the job landed after n1 was resumed
    assert sim.count("n1", "reboots") == 1 and sim.read("n1", "version") == NEW  # no reboot under its job
    assert sim.read("n1", "drained").startswith(REASON)
    found = entry(journal.load(), "n1")
    assert found is not None and "jobs still running" in str(found.reason)
    assert sim.read("n2", "version") == OLD and sim.count("n2", "reboots") == 2  # the failed one went back


def test_node_drained_by_someone_else_is_left_alone(tmp_path: Path) -> None:
    """An admin's drain is not ours to lift: the node is skipped, untouched, still drained with its reason."""
    sim = Sim(tmp_path, ["n1"])
    sim.create()
    (sim.dir("n1") / "drained").write_text("bad fan (admin)\n")
    outcome = sim.machine({}, FileJournal(tmp_path / "journal.json")).run(["n1"])
    assert outcome.skipped == {"n1": "drained by someone else: not upgraded"} and not outcome.failed
    assert (sim.read("n1", "drained"), sim.read("n1", "version")) == ("bad fan (admin)", OLD)


def _killed_at(tmp_path: Path, sim: Sim, point: str, reached: Callable[[RolloutJournal], bool],
               config: dict[str, Any]) -> RolloutJournal:
    """Run one upgrade of SIM's nodes in a child paused at failpoint POINT; SIGKILL it once the journal shows
    REACHED; the journal it left."""
    env = {**os.environ, ENV: f"{point}=sleep(120)", "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "tests.rollout.upgrade_sim", str(tmp_path), ",".join(sim.names),
                              json.dumps(config)], cwd=REPO, env=env)
    journal = FileJournal(tmp_path / "journal.json")
    try:
        poll(f"the child at {point}", lambda: (r := journal.load()) is not None and reached(r))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    record = journal.load()
    assert record is not None
    return record


def _state(record: RolloutJournal | None, node: str = "n1") -> str:
    found = entry(record, node)
    return str(found.state if found is not None else None)


@pytest.mark.parametrize("point,state", [
    ("upgrade.draining", "draining"), ("upgrade.waiting-for-jobs", "waiting-for-jobs"),
    ("upgrade.applying", "applying"), ("upgrade.before-apply", "applying"), ("upgrade.rebooting", "rebooting"),
    ("upgrade.reboot-issued", "rebooting"), ("upgrade.validating", "validating")])
def test_sigkill_at_each_step_resumes_from_the_journal_exactly_once(tmp_path: Path, point: str, state: str) -> None:
    """Killed at POINT, a new machine on the journal finishes the node: rebooted once, resumed once, new driver."""
    sim = Sim(tmp_path, ["n1"])
    sim.create()
    extra = {"upgrade.before-apply": lambda r: r.upgrade is not None and "n1" in r.upgrade.work,
             "upgrade.reboot-issued": lambda r: sim.count("n1", "reboots") == 1}
    record = _killed_at(tmp_path, sim, point, lambda r: _state(r) == state and extra.get(point, bool)(r), {})
    journal = FileJournal(tmp_path / "journal.json")
    outcome = sim.machine({}, journal, record=record).run([])
    assert outcome.done == ["n1"], outcome
    assert (sim.read("n1", "loaded"), sim.count("n1", "reboots"), sim.count("n1", "resumes")) == (NEW, 1, 1)
    assert sim.read("n1", "drained") == ""
    assert states(journal, "n1")[-1] == "done"


def test_sigkill_during_the_rollback_finishes_it_from_the_journal(tmp_path: Path) -> None:
    """Killed in rolling-back, the next machine undoes and reboots the node back, which stays drained."""
    sim = Sim(tmp_path, ["n1", "n2"])
    sim.create(broken=("n1",))
    record = _killed_at(tmp_path, sim, "upgrade.rolling-back", lambda r: _state(r) == "rolling-back",
                        {"max_unavailable": 1})
    journal = FileJournal(tmp_path / "journal.json")
    outcome = sim.machine({"max_unavailable": 1}, journal, record=record).run([])
    assert outcome.rolled_back == ["n1"] and _state(journal.load()) == "rolled-back"
    assert (sim.read("n1", "version"), sim.read("n1", "loaded"), sim.count("n1", "reboots")) == (OLD, OLD, 2)
    assert sim.read("n1", "drained").endswith("; rolled back") and sim.count("n1", "resumes") == 0
    assert (sim.read("n2", "version"), sim.count("n2", "reboots")) == (OLD, 0)


def reloading(sim: Sim, machine: Any, node: str, registers_after: float) -> None:
    """NODE's change needs a driver reload that restarts its daemon: the reload loads NEW and marks the node
    unregistered (`pending`, what `registered` reads) until REGISTERS_AFTER seconds later, as slurmd stopped and
    started again answers slurmctld only after its registration; the gate fails a node not registered yet."""
    from reconciler.engine.upgrade_steps import ReloadSteps
    from reconciler.rollout.upgrade import Prepared

    d = sim.dir(node)
    reload = ReloadSteps(commands=[f"cp {d}/version {d}/loaded; touch {d}/pending; "
                                   f"(sleep {registers_after}; rm -f {d}/pending) >/dev/null 2>&1 &"])
    validate = machine.hooks.validate

    def prepare(name: str) -> Prepared:
        if sim.read(name, "loaded") == NEW:
            return Prepared(None, [], lambda: None)
        return Prepared("driver-reload", [f"echo {OLD} > {d}/version"],
                        lambda: (d / "version").write_text(NEW + "\n") and None, f"driver {OLD} -> {NEW}")

    def gate(name: str) -> str | None:
        if (sim.dir(name) / "pending").exists():
            return "node checks: slurm state IDLE+NOT_RESPONDING"
        return validate(name)
    machine.hooks.reload, machine.hooks.prepare, machine.hooks.validate = (lambda name: reload), prepare, gate


def test_the_gate_runs_once_the_node_registered_again_after_a_driver_reload(tmp_path: Path) -> None:
    """A driver reload that stops and starts slurmd leaves the node NOT_RESPONDING until slurmd registers: the
    machine waits for `registered` (bounded by reboot_timeout) before the gate, instead of failing a healthy node
    (seen on the testbed); a node that never registers again fails naming the reload."""
    sim = Sim(tmp_path, ["n1", "n2"])
    sim.create()
    journal = FileJournal(tmp_path / "journal.json")
    machine = sim.machine({"max_unavailable": 1, "failure_budget": 1, "reboot_timeout": "10s"}, journal)
    reloading(sim, machine, "n1", registers_after=0.5)
    outcome = machine.run(["n1"])
    assert outcome.done == ["n1"] and not outcome.failed, outcome.failed
    assert states(journal, "n1") == [s if s != "rebooting" else "reloading" for s in FORWARD]
    assert (sim.read("n1", "loaded"), sim.count("n1", "reboots")) == (NEW, 0)

    never = FileJournal(tmp_path / "never.json")
    machine = sim.machine({"max_unavailable": 1, "failure_budget": 1, "reboot_timeout": "10s"}, never)
    reloading(sim, machine, "n2", registers_after=15)  # past the 10 s bound
    outcome = machine.run(["n2"])
    assert "not registered again within reboot_timeout 10s after the driver reload" in outcome.failed["n2"]
