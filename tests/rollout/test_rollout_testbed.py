"""Progressive rollouts on 16 compute nodes with real Slurm: a bad commit stops at the canary and is rolled back.

Every test pushes real commits to a real Git remote and watches a real `reconciler run` (enforce) apply them in
three waves (canary gpu01, then gpu[02-08], then gpu[09-16]), gated by a real smoke job through a real
reservation. Notifications go through real Apprise to a local JSON receiver.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.common import hostlist
from tests.daemon.harness import REPO, DaemonProcess
from tests.rollout.conftest import COMPUTES, GOOD_PROLOG, RolloutBed, journal, make_rbed
from tests.testbed_fixture import SLURM_RELEASES, Testbed, host_release

pytestmark = pytest.mark.timeout(900)
PROLOG = "/etc/slurm/prolog.sh"
MANAGED = "/etc/rollout-test.conf"
OTHER_NODES = 4  # the other release's bed: still three waves (canary 1, then 50%, then 100%)
WAVES = {16: ["gpu01", "gpu[02-08]", "gpu[09-16]"], 4: ["gpu01", "gpu02", "gpu[03-04]"]}
BUSY = {16: "gpu05", 4: "gpu02"}  # a node of the second wave, by the bed's size


def prolog_patch(content: str) -> Any:
    """An edit of patches.yaml replacing the prolog patch's content."""
    def edit(text: str) -> str:
        head, _, _ = text.partition("    content: |\n")
        body = "".join(f"      {line}\n" for line in content.splitlines())
        return head + "    content: |\n" + body
    return edit


def files_yaml(content: str, nodes: str = "gpu[01-16]") -> Any:
    """files.yaml: one managed file on every compute node (NODES)."""
    body = "".join(f"      {line}\n" for line in content.splitlines())
    return lambda _: f"files:\n  - path: {MANAGED}\n    nodes: {nodes}\n    content: |\n{body}"


def status_text(daemon: DaemonProcess) -> str:
    """`reconciler status` as an admin reads it."""
    out = subprocess.run([sys.executable, "-m", "reconciler.cli", "status", "--state-dir", str(daemon.state_dir)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def rollouts_of(daemon: DaemonProcess, commit: str) -> list[dict[str, Any]]:
    """Rollout records of COMMIT, from `reconciler history --format json`."""
    out = subprocess.run([sys.executable, "-m", "reconciler.cli", "history", "--state-dir", str(daemon.state_dir),
                          "--format", "json", "-n", "50"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [r["rollout"] for r in json.loads(out.stdout) if r.get("rollout") and r["rollout"]["commit"] == commit]


def rolled_back(daemon: DaemonProcess, commit: str, timeout: float = 240) -> dict[str, Any]:
    """Wait until COMMIT is recorded as rolled back; its record."""
    return daemon.wait_for(f"{commit[:12]} rolled back",
                           lambda: (daemon.status().get("rolled_back") or {}).get(commit), timeout)


def mtimes(rbed: RolloutBed, path: str) -> dict[str, str]:
    """PATH's modification time (ns) and inode on every compute node."""
    return rbed.on_all(f"stat -c '%.9Y %i' {path} 2>/dev/null || echo absent")


@pytest.fixture(scope="module")
def daemon(rbed: RolloutBed) -> DaemonProcess:
    """One daemon for the module's tests (each pushes its own commits)."""
    running = rbed.daemon(state_dir=rbed.root / "state-main")
    running.wait_applied(rbed.remote.head(), timeout=120)
    return running


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def released(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RolloutBed, DaemonProcess]]:
    """A bed and its daemon for each Slurm release: the package's 16-node bed for the host's release, a second
    OTHER_NODES-node bed for the other one (torn down after this module)."""
    if request.param == host_release():
        yield request.getfixturevalue("rbed"), request.getfixturevalue("daemon")
        return
    other = make_rbed(testbed_factory, tmp_path_factory, nodes=OTHER_NODES, slurm=request.param)
    try:
        running = other.daemon(state_dir=other.root / "state-main")
        running.wait_applied(other.remote.head(), timeout=120)
        yield other, running
    finally:
        other.close()
        other.bed.testbed.down()


def test_bad_prolog_stops_at_the_canary_is_rolled_back_and_never_retried(
        released: tuple[RolloutBed, DaemonProcess]) -> None:
    rbed, daemon = released
    computes = rbed.computes
    before = mtimes(rbed, PROLOG)
    assert set(rbed.on_all(f"cat {PROLOG}").values()) == {GOOD_PROLOG.strip()}
    bad = rbed.remote.commit("prolog that fails", {"patches.yaml": prolog_patch("#!/bin/sh\necho no >&2\nexit 1")})

    record = rolled_back(daemon, bad)
    assert record["gate"] == "smoke-job", record
    assert record["nodes"] == "gpu01", record
    # Only the canary got it, and it has the old script back; no other node's file was touched.
    after = mtimes(rbed, PROLOG)
    assert {n: after[n] for n in computes[1:]} == {n: before[n] for n in computes[1:]}
    assert set(rbed.on_all(f"cat {PROLOG}").values()) == {GOOD_PROLOG.strip()}
    # Slurm drained the canary ("Prolog error"); the rollback resumed it: every node takes a job again.
    assert rbed.drained() == {}
    srun = rbed.bed.exec("ctl", f"timeout 60 srun -N{len(computes)} --immediate=30 true", check=False)
    assert srun.returncode == 0, srun.stderr
    text = status_text(daemon)
    assert "smoke-job" in text and "gpu01" in text and "Prolog error" in text, text
    # Exactly one notification says so, with the folded nodes (the webhook is the package's: other tests' too).
    def said() -> list[dict[str, Any]]:
        return [m for m in rbed.webhook.titled("rolled back") if f"commit {bad[:12]} " in str(m.get("title"))]

    rolled = daemon.wait_for("the rolled-back message", said, 30)
    assert len(rolled) == 1 and "gpu01" in str(rolled[0]), rbed.webhook.messages

    # The commit is not applied again on the next cycles (1 s polls).
    time.sleep(6)
    assert len(rollouts_of(daemon, bad)) == 1
    assert mtimes(rbed, PROLOG) == after
    assert any(e.get("event") == "commit.rolled_back_skipped" for e in daemon.events())
    assert len(said()) == 1

    fixed = rbed.remote.commit("prolog fixed", {"patches.yaml": prolog_patch("#!/bin/sh\necho fixed\nexit 0")})
    daemon.wait_applied(fixed, timeout=300)
    (done,) = rollouts_of(daemon, fixed)
    assert done["status"] == "complete", done
    assert [w["nodeset"] for w in done["waves"]["waves"]] == WAVES[len(computes)]
    assert all(w["ok"] for w in done["timeline"]) and len(done["timeline"]) == 3
    assert set(rbed.on_all(f"cat {PROLOG}").values()) == {"#!/bin/sh\necho fixed\nexit 0"}
    assert rbed.drained() == {}


def test_mount_of_a_missing_export_fails_on_the_canary_and_is_restored(rbed: RolloutBed,
                                                                        daemon: DaemonProcess) -> None:
    fstab = rbed.on_all("cat /etc/fstab")
    stamps = mtimes(rbed, "/etc/fstab")
    storage = rbed.remote.work / "storage.yaml"
    mount = ("    - source: ctl:/srv/shared/does-not-exist\n      mountpoint: /data\n      nodes: gpu[01-16]\n")
    bad = rbed.remote.commit("mount a path the server does not export",
                             {"storage.yaml": lambda text: text.replace("images:\n", mount + "images:\n")})
    assert "/srv/shared/does-not-exist" in storage.read_text()

    record = rolled_back(daemon, bad)
    assert record["nodes"] == "gpu01", record
    assert "No such file or directory" in str(record), record
    assert rbed.on_all("cat /etc/fstab") == fstab
    assert {n: v for n, v in mtimes(rbed, "/etc/fstab").items() if n != "gpu01"} == \
        {n: v for n, v in stamps.items() if n != "gpu01"}
    assert rbed.on_all("mountpoint -q /data && echo mounted || echo no") == {n: "no" for n in COMPUTES}
    assert rbed.on_all("mountpoint -q /shared && echo mounted || echo no") == {n: "mounted" for n in COMPUTES}
    assert rbed.drained() == {}
    # Put the desired state back as it was, so later tests start from a clean commit.
    good = rbed.remote.commit("drop the bad mount", {"storage.yaml": lambda text: text.replace(mount, "")})
    daemon.wait_applied(good, timeout=120)


def test_good_commit_goes_through_three_waves_without_touching_a_running_job(
        released: tuple[RolloutBed, DaemonProcess]) -> None:
    rbed, daemon = released
    busy = BUSY[len(rbed.computes)]
    job = rbed.exec("ctl", f"sbatch --parsable -w {busy} -n1 --wrap 'sleep 900'").strip()
    daemon.wait_for("the job to run", lambda: rbed.exec("ctl", f"squeue -h -j {job} -o %T").strip() == "RUNNING",
                    60)
    try:
        good = rbed.remote.commit("a managed file everywhere", {"files.yaml": files_yaml("setting = 1", hostlist.compress(rbed.computes))})
        daemon.wait_applied(good, timeout=300)
        assert rbed.exec("ctl", f"squeue -h -j {job} -o %T").strip() == "RUNNING"
        (done,) = rollouts_of(daemon, good)
        assert done["status"] == "complete"
        timeline = done["timeline"]
        assert [w["nodes"] for w in timeline] == WAVES[len(rbed.computes)]
        for wave in timeline:
            assert wave["started"] <= wave["applied_at"] <= wave["ended"]
            assert [g["gate"] for g in wave["gates"]] == ["smoke-job"] and all(g["ok"] for g in wave["gates"])
        assert "soak" in timeline[0] and "soak" in timeline[1] and timeline[1]["soak"]["ok"]
        # The smoke job ran beside the job on the busy node (one CPU of two): it was not skipped there.
        assert "skipped" not in timeline[1]["gates"][0]["message"]
        assert set(rbed.on_all(f"cat {MANAGED}").values()) == {"setting = 1"}
        assert "rollout" in status_text(daemon)
    finally:
        rbed.exec("ctl", f"scancel {job}", check=False)


def test_slurm_conf_change_goes_out_together_gated_and_is_rolled_back_together(
        released: tuple[RolloutBed, DaemonProcess]) -> None:
    rbed, daemon = released
    body = "tail -n +2 /etc/slurm/slurm.conf"  # the first line names the commit that wrote the file
    conf = rbed.on_all(body)
    bad = rbed.remote.commit("typo in the Prolog path", {"cluster.yaml": lambda text: text.replace(
        "Prolog: /etc/slurm/prolog.sh", "Prolog: /etc/slurm/prolgo.sh")})
    try:
        check_cluster_wave_rolled_back(rbed, daemon, bad, body, conf)
    finally:  # later tests start from a good head whatever happened here
        good = rbed.remote.commit("Prolog path fixed", {"cluster.yaml": lambda text: text.replace(
            "Prolog: /etc/slurm/prolgo.sh", "Prolog: /etc/slurm/prolog.sh")})
        daemon.wait_applied(good, timeout=120)


def check_cluster_wave_rolled_back(rbed: RolloutBed, daemon: DaemonProcess, bad: str, body: str,
                                   conf: dict[str, str]) -> None:
    """The bad slurm.conf went out as one gated wave and every node has the old file back, undrained."""
    record = rolled_back(daemon, bad)
    assert record["gate"] == "smoke-job" and record["wave"] == 1, record
    (done,) = rollouts_of(daemon, bad)
    (wave,) = done["waves"]["waves"]
    assert wave["cluster"] and wave["name"] == "cluster" and "slurm.conf" in wave["why"]
    assert done["waves"]["gates"][0] == "slurm" and done["timeline"][0]["gates"][0]["ok"]  # slurmctld fine
    assert rbed.on_all(body) == conf
    # 24.11 prints each of several Prologs as Prolog[i] (22.05: Prolog)
    prolog = rbed.exec("ctl", "scontrol show config | grep -E '^Prolog(\\[[0-9]+\\])? '")
    assert "prolgo" not in prolog and "/etc/slurm/prolog.sh" in prolog, prolog
    assert rbed.drained() == {}
    # Slurm drained the nodes the job's prolog failed on ("Prolog error"): all resumed, none left drained.
    assert record["resumed"] and set(record["resumed"]) <= set(rbed.computes)
    srun = rbed.bed.exec("ctl", f"timeout 60 srun -N{len(rbed.computes)} --immediate=30 true", check=False)
    assert srun.returncode == 0, srun.stderr


@pytest.mark.parametrize("phase", ["applying", "gating", "soaking"])
def test_sigkill_during_wave_two_is_finished_on_the_next_start(rbed: RolloutBed, daemon: DaemonProcess,
                                                               phase: str) -> None:
    daemon.stop()
    state_dir = daemon.state_dir
    old = set(rbed.on_all(f"cat {MANAGED} 2>/dev/null").values())
    content = f"setting = {phase}"
    # Failpoints hold each step for 2 s, so the kill lands in it (the steps take well under a second here).
    running = rbed.daemon(state_dir=state_dir, failpoints="wave.after-apply=sleep(2);wave.before-gates=sleep(2)")
    commit = rbed.remote.commit(f"kill during wave 2 {phase}", {"files.yaml": files_yaml(content)})
    running.wait_for(f"wave 2 {phase}", lambda: (j := journal(state_dir)) is not None and j.get("commit") == commit
                     and j.get("wave") == 1 and j.get("phase") == phase, 240)
    running.kill()
    # Right after the kill: every node has the old or the new file, whole; the journal says which wave was on.
    seen = rbed.on_all(f"cat {MANAGED}")
    assert set(seen.values()) <= old | {content}, seen
    assert journal(state_dir) is not None

    restarted = rbed.daemon(state_dir=state_dir)
    restarted.wait_applied(commit, timeout=300)
    assert set(rbed.on_all(f"cat {MANAGED}").values()) == {content}
    assert journal(state_dir) is None
    assert any(e.get("event") == "rollout.recover" for e in restarted.events())
    assert rbed.drained() == {}
    restarted.stop()


@pytest.mark.parametrize("point", ["rollback.before-apply", "rollback.after-apply"])
def test_sigkill_during_a_rollback_is_finished_on_the_next_start(rbed: RolloutBed, daemon: DaemonProcess,
                                                                  point: str) -> None:
    daemon.stop()
    state_dir = daemon.state_dir
    good = rbed.on_all(f"cat {PROLOG}")
    running = rbed.daemon(state_dir=state_dir, failpoints=f"{point}=sleep(30)")
    bad = rbed.remote.commit(f"failing prolog ({point})",
                             {"patches.yaml": prolog_patch(f"#!/bin/sh\n# {point}\nexit 1")})
    running.wait_for("the rollback", lambda: (j := journal(state_dir)) is not None and j.get("commit") == bad
                     and j.get("phase") == "rolling-back", 240)
    if point == "rollback.after-apply":  # killed with the files restored and the drain not yet resumed
        running.wait_for("the canary restored", lambda: rbed.on_all(f"cat {PROLOG}") == good, 30)
        assert "gpu01" in rbed.drained()
    else:  # killed before anything was undone: the canary still has the bad script
        assert rbed.exec("gpu01", f"cat {PROLOG}").strip().endswith("exit 1")
    running.kill()
    entry = journal(state_dir)
    assert entry is not None and entry["phase"] == "rolling-back"

    restarted = rbed.daemon(state_dir=state_dir)
    record = rolled_back(restarted, bad)
    assert record["nodes"] == "gpu01"
    assert rbed.on_all(f"cat {PROLOG}") == good
    assert journal(state_dir) is None
    assert rbed.drained() == {}
    assert any(e.get("event") == "rollout.recover" for e in restarted.events())
    time.sleep(3)
    assert len([r for r in rollouts_of(restarted, bad) if r["status"] == "rolled-back"]) == 1
    restarted.stop()


def test_cli_apply_uses_the_same_waves_and_rolls_back_to_previous(rbed: RolloutBed, daemon: DaemonProcess,
                                                                   tmp_path: Path) -> None:
    daemon.stop()  # a human applies by hand: no daemon beside it
    good, bad = tmp_path / "good", tmp_path / "bad"
    current = rbed.exec("gpu02", f"cat {PROLOG}")
    shutil.copytree(rbed.remote.work, good, ignore=shutil.ignore_patterns(".git"))
    (good / "patches.yaml").write_text(prolog_patch(current)((good / "patches.yaml").read_text()))
    shutil.copytree(good, bad)
    (bad / "patches.yaml").write_text(prolog_patch("#!/bin/sh\nexit 1")((bad / "patches.yaml").read_text()))
    in_sync = rbed.bed.cli("plan", str(good))
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr
    stamps = mtimes(rbed, PROLOG)

    planned = rbed.bed.cli("plan", str(bad))
    assert planned.returncode == 2 and "wave 1/3 canary: gpu01" in planned.stdout, planned.stdout
    as_json = json.loads(rbed.bed.cli("plan", str(bad), "--format", "json").stdout)
    assert [w["nodeset"] for w in as_json["rollout"]["waves"]] == ["gpu01", "gpu[02-08]", "gpu[09-16]"]
    assert as_json["rollout"]["gates"] == ["smoke-job"]
    markdown = rbed.bed.cli("plan", str(bad), "--format", "markdown").stdout
    assert "**Rollout**" in markdown and "gpu[09-16]" in markdown
    out = rbed.bed.cli("apply", str(bad), "--yes", "--previous", str(good))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "rollout rolled-back" in out.stdout and "smoke-job" in out.stdout and "rolled back gpu01" in out.stdout
    assert rbed.on_all(f"cat {PROLOG}") == {n: current.strip() for n in COMPUTES}
    assert {n: v for n, v in mtimes(rbed, PROLOG).items() if n != "gpu01"} == \
        {n: v for n, v in stamps.items() if n != "gpu01"}
    assert rbed.drained() == {}
