"""The lease on the controller (reconciler/ha/lease.py): compare-and-swap under flock, terms, expiry, release,
the crash journal beside it; the real script in a real `sh`, several processes at once."""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reconciler.ha.lease import LEASE_COMMAND, LeaseError, LeaseStore
from tests.ha.local_shell import LocalShell, spec

CTL = spec("ctl")


def acquire(store: LeaseStore, holder: str, epoch: int | None = None, duration: float = 30.0) -> tuple[str | None, int]:
    view = store.call(LocalShell(), CTL, {"op": "acquire", "holder": holder, "epoch": epoch, "duration": duration})
    return view.holder, view.epoch


def test_first_comer_leads_the_other_waits_and_renewing_keeps_the_term(tmp_path: Path) -> None:
    store = LeaseStore(str(tmp_path / "ha"), timeout=10)
    assert acquire(store, "login1") == ("login1", 1)
    assert acquire(store, "login2") == ("login1", 1)  # held: login2 is a standby
    assert acquire(store, "login1", epoch=1) == ("login1", 1)  # a renewal keeps the term
    log = [json.loads(line) for line in (tmp_path / "ha" / "leases.log").read_text().splitlines()]
    assert [(e["event"], e["epoch"], e["holder"]) for e in log] == [("acquired", 1, "login1")]


def test_an_expired_lease_goes_to_the_next_asker_with_a_new_term(tmp_path: Path) -> None:
    store = LeaseStore(str(tmp_path / "ha"), timeout=10)
    assert acquire(store, "login1", duration=0.5) == ("login1", 1)
    time.sleep(0.7)
    assert acquire(store, "login2") == ("login2", 2)
    # the old leader comes back with its old term: it is told who leads, it gets nothing
    assert acquire(store, "login1", epoch=1) == ("login2", 2)


def test_a_restarted_holder_waits_out_its_old_term_then_starts_a_new_one(tmp_path: Path) -> None:
    """Same name, no term in hand (a restarted process): not granted while the old term runs (its former self may
    still act), then a new epoch, so that former self is fenced too."""
    store = LeaseStore(str(tmp_path / "ha"), timeout=10)
    # a term of seconds: under load the second call came after a 0.5 s term had ended (CI, 2 cores)
    assert acquire(store, "login1", duration=3) == ("login1", 1)
    again = store.call(LocalShell(), CTL, {"op": "acquire", "holder": "login1", "epoch": None, "duration": 30})
    assert (again.granted, again.epoch) == (False, 1)
    time.sleep(3.3)
    assert acquire(store, "login1", epoch=None) == ("login1", 2)


def test_release_hands_over_at_once(tmp_path: Path) -> None:
    store = LeaseStore(str(tmp_path / "ha"), timeout=10)
    acquire(store, "login1")
    released = store.call(LocalShell(), CTL, {"op": "release", "holder": "login1", "epoch": 1})
    assert released.holder is None
    assert acquire(store, "login2") == ("login2", 2)
    # a release by someone who does not hold the term changes nothing
    store.call(LocalShell(), CTL, {"op": "release", "holder": "login1", "epoch": 1})
    assert acquire(store, "login1") == ("login2", 2)


def test_a_reboot_of_the_lease_node_expires_the_lease(tmp_path: Path) -> None:
    """A different boot id (an edited copy of the lease file stands for the reboot) means no one holds it."""
    store = LeaseStore(str(tmp_path / "ha"), timeout=10)
    acquire(store, "login1")
    path = tmp_path / "ha" / "lease.json"
    lease = json.loads(path.read_text())
    lease["boot"] = "00000000-0000-0000-0000-000000000000"
    path.write_text(json.dumps(lease))
    assert acquire(store, "login2") == ("login2", 2)


def test_only_the_current_term_writes_the_crash_journal(tmp_path: Path) -> None:
    store = LeaseStore(str(tmp_path / "ha"), timeout=10)
    acquire(store, "login1")
    store.call(LocalShell(), CTL, {"op": "save", "holder": "login1", "epoch": 1, "entries": {"applied": {"commit": "a"}}})
    with pytest.raises(LeaseError, match="not the holder of epoch 1"):
        store.call(LocalShell(), CTL, {"op": "save", "holder": "login2", "epoch": 1, "entries": {"applied": None}})
    journal = store.call(LocalShell(), CTL, {"op": "load"}).journal
    assert journal is not None
    assert journal["applied"] == {"commit": "a"}
    assert (journal["writer"]["holder"], journal["writer"]["epoch"]) == ("login1", 1)


def test_many_askers_at_once_get_exactly_one_leader(tmp_path: Path) -> None:
    directory = str(tmp_path / "ha")

    def ask(name: str) -> dict[str, object]:
        out = subprocess.run(["sh", "-c", LEASE_COMMAND], capture_output=True, text=True, check=True,
                             input=json.dumps({"op": "acquire", "holder": name, "epoch": None, "duration": 30,
                                               "dir": directory}))
        return dict(json.loads(out.stdout))

    for round_ in range(3):  # three fresh elections
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(ask, [f"login{i}-{round_}" for i in range(8)]))
        holders = {a["holder"] for a in answers}
        assert len(holders) == 1, answers
        assert {a["epoch"] for a in answers} == {round_ + 1}
        (tmp_path / "ha" / "lease.json").write_text(json.dumps({**json.loads(
            (tmp_path / "ha" / "lease.json").read_text()), "expires": 0.0}))  # expire it for the next round
    log = [json.loads(line) for line in (tmp_path / "ha" / "leases.log").read_text().splitlines()]
    assert [e["epoch"] for e in log] == [1, 2, 3]  # one new term per election, never two


def test_an_unreachable_lease_node_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    class Down(LocalShell):
        def run(self, node, command, *, stdin=None, timeout=None):  # type: ignore[no-untyped-def]
            from reconciler.transport.base import CommandResult
            return CommandResult(node.name, None, "", "", 0.0, error="connection refused")

    with pytest.raises(LeaseError, match="lease node ctl: ctl: connection refused"):
        LeaseStore(str(tmp_path), timeout=1).call(Down(), CTL, {"op": "acquire", "holder": "x", "duration": 5})
