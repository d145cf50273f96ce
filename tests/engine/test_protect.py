"""A step that would end other nodes' jobs (FollowUp.protect): drained and waited empty before it, resumed after;
a drain someone else set is waited for, never lifted; past drain_timeout the step does not run. Over a local shell
whose "nodes" are files (engine/apply.py, engine/drain.py); the testbed shows it on Slurm
(tests/params/test_job_kill_steps_testbed.py)."""

from __future__ import annotations

import shlex
import threading
import time
from pathlib import Path

from reconciler.engine.apply import Applier, ApplyOptions
from reconciler.engine.followups import DrainSteps, command
from tests.engine.test_needs_held import _Ctx
from tests.ha.local_shell import LocalShell

NODES = ("ctl", "gpu01", "gpu02")


def steps(root: Path, node: str) -> DrainSteps:
    """A node as files: `jobs` (one line per job), `drained` (its reason); every action logged to `events`."""
    d, log = shlex.quote(str(root / node)), shlex.quote(str(root / "events"))
    return DrainSteps(run_on="ctl", jobs=f"cat {d}/jobs", drained=f"test -s {d}/drained",
                      drain=f"echo ours > {d}/drained && echo drain {node} >> {log}",
                      resume=f"rm -f {d}/drained && echo resume {node} >> {log}",
                      ours=f"grep -qx ours {d}/drained")


def setup(root: Path, jobs: dict[str, str], drained: dict[str, str]) -> None:
    for node in ("gpu01", "gpu02"):
        (root / node).mkdir(parents=True)
        (root / node / "jobs").write_text(jobs.get(node, ""))
        if node in drained:
            (root / node / "drained").write_text(drained[node] + "\n")
    (root / "events").write_text("")


def empty_later(path: Path, seconds: float) -> None:
    """The jobs of PATH end after SECONDS (a thread)."""
    def end() -> None:
        time.sleep(seconds)
        path.write_text("")
    threading.Thread(target=end).start()


def run(root: Path, timeout: float) -> tuple[bool, list[str], Applier]:
    step = command("ctl", f"echo step >> {shlex.quote(str(root / 'events'))}", 30, "node CPUs changed")
    step.protect = {node: steps(root, node) for node in ("gpu01", "gpu02")}
    applier = Applier(_Ctx(NODES), LocalShell(), ApplyOptions(drain_timeout=timeout, poll_interval=0.05),  # type: ignore[arg-type]
                      log=lambda _: None)
    ok = applier._followup(step)
    return ok, (root / "events").read_text().split("\n")[:-1], applier


def test_busy_nodes_are_drained_and_waited_for_then_the_idle_ones_then_the_step_then_resumed(tmp_path: Path) -> None:
    setup(tmp_path, {"gpu01": "41\n"}, {})
    empty_later(tmp_path / "gpu01" / "jobs", 0.5)
    began = time.monotonic()
    ok, events, _ = run(tmp_path, timeout=30)
    assert ok and time.monotonic() - began >= 0.5  # it waited for job 41
    assert events == ["drain gpu01", "drain gpu02", "step", "resume gpu01", "resume gpu02"]
    assert not (tmp_path / "gpu01" / "drained").exists() and not (tmp_path / "gpu02" / "drained").exists()


def test_a_drain_someone_else_set_is_waited_for_and_never_lifted(tmp_path: Path) -> None:
    setup(tmp_path, {"gpu02": "7\n"}, {"gpu02": "nhc: bad dimm"})
    empty_later(tmp_path / "gpu02" / "jobs", 0.3)
    ok, events, _ = run(tmp_path, timeout=30)
    assert ok and events == ["drain gpu01", "step", "resume gpu01"]
    assert (tmp_path / "gpu02" / "drained").read_text() == "nhc: bad dimm\n"


def test_past_drain_timeout_the_step_does_not_run_and_its_own_drains_are_lifted(tmp_path: Path) -> None:
    setup(tmp_path, {"gpu01": "41\n"}, {})
    ok, events, applier = run(tmp_path, timeout=0.3)
    assert not ok and "step" not in events
    assert events == ["drain gpu01", "resume gpu01"]  # gpu02 never drained: the wait on gpu01 ran out first
    assert applier.result.failures == {"ctl": [
        "jobs still running on gpu01 after 0s; not done: run `echo step >> "
        f"{tmp_path / 'events'}` (it would end them); left for the next apply"]}
