"""The upgrade machine asks its admission (reconciler/rollout/admission.py) before each node: a hold starts no
node and lets the one in flight finish, a wait skips only that node, what the rest wait for is journalled and
cleared; over a real local shell and the STAND-IN file cluster of tests/rollout/upgrade_sim.py."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from reconciler.rollout.admission import GO, Admissions, OwnCount, Verdict
from tests.rollout.test_upgrade import BOUND, entry, poll, states
from tests.rollout.upgrade_sim import NEW, FileJournal, Sim


class Switch:
    """Holds every node while `closed` is set; records who was asked and with what out."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def admit(self, node: str, out: Sequence[str]) -> Verdict:
        """Hold while closed."""
        self.asked.append((node, tuple(out)))
        return Verdict("hold", "window closed", until=123.0) if self.closed.is_set() else GO


def test_a_hold_starts_no_node_lets_the_one_in_flight_finish_and_is_journalled(tmp_path: Path) -> None:
    sim = Sim(tmp_path, ["n1", "n2", "n3"])
    sim.create()
    for node in ("n1", "n2", "n3"):  # all busy (so n1 goes first): n1 waits for its job when the hold comes
        (sim.dir(node) / "jobs").write_text("4711\n")
    switch = Switch()
    journal = FileJournal(tmp_path / "journal.json")
    machine = sim.machine({"max_unavailable": 1}, journal, admission=Admissions([switch, OwnCount(1)]))
    thread = threading.Thread(target=machine.run, args=(["n1", "n2", "n3"],))
    switch.closed.set()
    thread.start()
    poll("the hold journalled", lambda: (r := journal.load()) is not None and r.upgrade is not None
         and r.upgrade.waiting is not None)
    record = journal.load()
    assert record is not None and record.upgrade is not None and record.upgrade.waiting is not None
    assert (record.upgrade.waiting.kind, record.upgrade.waiting.why, record.upgrade.waiting.until) == (
        "hold", "window closed", 123.0)
    assert record.upgrade.waiting.nodes == ["n1", "n2", "n3"]
    assert all(states(journal, n) == ["upgrade-required"] for n in ("n1", "n2", "n3"))
    switch.closed.clear()
    poll("n1 in flight", lambda: (e := entry(journal.load(), "n1")) is not None and e.state == "waiting-for-jobs")
    switch.closed.set()  # the window closes while n1 waits for its job
    (sim.dir("n1") / "jobs").write_text("")
    poll("n1 done", lambda: (e := entry(journal.load(), "n1")) is not None and e.state == "done")
    assert states(journal, "n2") == states(journal, "n3") == ["upgrade-required"]  # nothing new started
    for node in ("n2", "n3"):
        (sim.dir(node) / "jobs").write_text("")
    switch.closed.clear()
    thread.join(BOUND)
    assert not thread.is_alive()
    assert [sim.read(n, "loaded") for n in ("n1", "n2", "n3")] == [NEW, NEW, NEW]
    final = journal.load()
    assert final is not None and final.upgrade is not None and final.upgrade.waiting is None


def test_a_wait_passes_over_that_node_only_and_own_count_bounds_the_nodes_out(tmp_path: Path) -> None:
    sim = Sim(tmp_path, ["n1", "n2", "n3"])
    sim.create()

    class NotN1:
        def admit(self, node: str, out: Sequence[str]) -> Verdict:
            return Verdict("wait", "partition a at its minimum") if node == "n1" and not done_n3() else GO

    journal = FileJournal(tmp_path / "journal.json")

    def done_n3() -> bool:
        found = entry(journal.load(), "n3")
        return found is not None and found.state == "done"
    switch = Switch()
    machine = sim.machine({"max_unavailable": 1}, journal, admission=Admissions([NotN1(), switch, OwnCount(1)]))
    outcome = machine.run(["n1", "n2", "n3"])
    assert sorted(outcome.done) == ["n1", "n2", "n3"]
    firsts: dict[str, int] = {}
    for save in journal.saves:
        for node in ("n1", "n2", "n3"):
            found = entry(save, node)
            if found is not None and found.state == "draining":
                firsts.setdefault(node, len(firsts))
    assert firsts["n1"] == 2  # n1 waited; n2 and n3 went first
    waits = [s.upgrade.waiting for s in journal.saves if s.upgrade is not None and s.upgrade.waiting is not None]
    assert any(w.kind == "wait" and w.why == "partition a at its minimum" for w in waits)
