"""A daemon's first commit (no applied commit to go back to) fails its canary gate; the daemon is SIGKILLed while
restoring the canary to its before-image, and the restarted daemon finishes the restore from the before-images
kept in its rollout journal: the canary's prolog is back byte for byte, its drain resumed, and `status` and the
notification say what was restored, naming no commit.

Real `reconciler run` daemons (the kill lands at the `rollback.before-apply` failpoint), real Slurm, real sshd,
real SQLite journal, real Apprise to a local receiver, on the rollout package's 16-node testbed.
"""

from __future__ import annotations

import pytest

from tests.rollout.conftest import RolloutBed, journal
from tests.rollout.test_rollout_testbed import PROLOG, prolog_patch, rolled_back, status_text

pytestmark = pytest.mark.timeout(900)
IMAGE = f"sha256sum {PROLOG} && stat -c '%a %U %G %s' {PROLOG}"


@pytest.mark.parametrize("point", ["rollback.before-apply", "rollback.after-apply"])
def test_killed_during_a_first_commit_restore_the_restart_finishes_it(rbed: RolloutBed, point: str) -> None:
    for running in rbed.started:  # one daemon on the cluster: this test's
        running.stop()
    good = rbed.exec("gpu01", f"cat {PROLOG}")
    image = rbed.on_all(IMAGE)
    bad = rbed.remote.commit(f"failing prolog as a first commit ({point})",
                             {"patches.yaml": prolog_patch(f"#!/bin/sh\n# {point}\nexit 1")})
    first = rbed.daemon(failpoints=f"{point}=sleep(300)")  # a fresh state directory: no applied commit
    try:
        first.wait_for("the restore", lambda: (j := journal(first.state_dir)) is not None and j.get("commit") == bad
                       and j.get("phase") == "rolling-back", 400)
        held = journal(first.state_dir)
        assert held is not None and held["previous"] is None, held
        items = held["before_image"]["items"]
        assert [(i["node"], i["restore"]["missing"]) for i in items] == [("gpu01", None)], items
        if point == "rollback.after-apply":  # killed with the canary restored and its drain not yet resumed
            first.wait_for("the canary restored", lambda: rbed.on_all(IMAGE) == image, 120)
            assert (journal(first.state_dir) or {}).get("restoring") is True
        else:  # killed before anything was restored: the canary still has the bad script
            assert rbed.exec("gpu01", f"cat {PROLOG}").strip().endswith("exit 1")
        assert "gpu01" in rbed.drained()  # Slurm drained the canary for its prolog error
    finally:
        first.kill()
    assert (journal(first.state_dir) or {}).get("phase") == "rolling-back"

    second = rbed.daemon(state_dir=first.state_dir)
    try:
        record = rolled_back(second, bad, timeout=300)
        assert record["nodes"] == "gpu01" and record["to"] is None and record["status"] == "rolled-back", record
        assert rbed.on_all(IMAGE) == image  # byte for byte, mode and owner, on the canary and everywhere else
        assert journal(second.state_dir) is None
        assert rbed.drained() == {}
        assert any(e.get("event") == "rollout.recover" for e in second.events())
        text = status_text(second)
        assert ("restored gpu01 to the state found before the apply (before-images; no earlier commit to go back "
                "to)") in text, text
        assert "gpu01: resumed (drained during the rollout)" in text, text
        restored = f"gpu01: {PROLOG} back to its {len(good)} bytes before the apply, mode 0755 root:root"
        if point == "rollback.after-apply":  # the killed daemon restored it: not "the change never landed"
            assert ("already as before (restored before a restart, or the change never landed there):\n"
                    f"      gpu01: {PROLOG}\n") in text, text
            assert restored not in text, text
        else:
            assert restored in text and "already as before" not in text, text
        assert "rolled back gpu01 to" not in text and "NOT restored" not in text, text
        titles = second.wait_for("the restore message", lambda: [m["title"] for m in rbed.webhook.messages
                                                                 if bad[:12] in str(m.get("title"))
                                                                 and "restored" in str(m.get("title"))], 60)
        assert titles == [f"reconciler: commit {bad[:12]} failed; nodes restored to the state before it"], titles

        fixed = rbed.remote.commit(f"prolog as it was ({point})", {"patches.yaml": prolog_patch(good)})
        second.wait_applied(fixed, timeout=300)
        assert rbed.on_all(IMAGE) == image and set(rbed.on_all(f"cat {PROLOG}").values()) == {good.strip()}
    finally:
        second.stop()
