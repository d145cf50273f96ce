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


def test_capacity_counts_a_humans_drains_so_no_more_than_max_unavailable_are_ever_out(tmp_path: Path) -> None:
    """8 nodes, 2 drained by a human, max_unavailable 50% (4): never more than 2 of the machine's own out at once,
    read from Slurm's stand-in view (the sim's drain files); the human's nodes are left alone, never resumed."""
    from reconciler.engine.workload import NodeStatus, NodesView
    from reconciler.model.upgrade import Upgrade
    from reconciler.rollout.capacity import Capacity, CapacityAdmission

    names = [f"n{i}" for i in range(1, 9)]
    sim = Sim(tmp_path, names)
    sim.create()
    for node in ("n1", "n2"):
        (sim.dir(node) / "drained").write_text("admin: bad fan\n")

    def view() -> NodesView:
        return NodesView(nodes={n: NodeStatus("IDLE+DRAIN" if sim.read(n, "drained") else "IDLE",
                                              sim.read(n, "drained") or None, drained=bool(sim.read(n, "drained")))
                                for n in names})
    config = Upgrade.model_validate({"max_unavailable": "50%"})
    capacity = CapacityAdmission(Capacity(config, names, {"all": names}), view, max_age=0.0)
    journal = FileJournal(tmp_path / "journal.json")
    outcome = sim.machine({"max_unavailable": "50%"}, journal, admission=capacity).run(names)
    assert sorted(outcome.done) == names[2:] and sorted(outcome.skipped) == ["n1", "n2"]
    most = 0
    for save in journal.saves:
        assert save.upgrade is not None
        out = [n for n, e in save.upgrade.nodes.items()  # n1, n2 only look (drained by someone else: left alone)
               if e.state not in ("upgrade-required", "done") and n not in ("n1", "n2")]
        most = max(most, len(out))
    assert most == 2
    assert [sim.read(n, "drained") for n in ("n1", "n2")] == ["admin: bad fan"] * 2 and sim.count("n1", "resumes") == 0
    waits = [s.upgrade.waiting for s in journal.saves if s.upgrade is not None and s.upgrade.waiting is not None]
    assert any(w.kind == "wait" and w.why.startswith("max_unavailable 50% of 8 = 4: 4 unavailable (n1 IDLE+DRAIN: "
                                                      "'admin: bad fan', n2 IDLE+DRAIN: 'admin: bad fan'")
               for w in waits), waits
