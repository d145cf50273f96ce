"""The daemon end to end on the testbed: commits applied, bad commits skipped, force-push, drift, crash, metrics."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonBed
from tests.daemon.harness import REPO, DaemonProcess, git

pytestmark = pytest.mark.timeout(600)

COMPUTES = ("gpu01", "gpu02")
MANAGED = {"ctl": ["/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/exports"],
           "gpu01": ["/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/fstab", "/etc/slurm/prolog.sh"],
           "gpu02": ["/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/fstab", "/etc/slurm/prolog.sh"]}


def partitions(d: DaemonBed) -> set[str]:
    """Partition names that `sinfo` on ctl shows."""
    out = d.bed.exec("ctl", "sinfo -h -o %R", check=False).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def add_partition(name: str, max_time: str = "00:30:00") -> dict[str, object]:
    """An edit of cluster.yaml adding a partition before `batch`."""
    entry = f'    - name: {name}\n      nodes: gpu[01-02]\n      MaxTime: "{max_time}"\n'
    return {"cluster.yaml": lambda text: text.replace("    - name: batch\n", entry + "    - name: batch\n", 1)}


def file_hashes(d: DaemonBed) -> dict[str, str]:
    """sha256 of every managed file on every node (missing files included)."""
    out = {}
    for node, paths in MANAGED.items():
        listing = d.bed.exec(node, "sha256sum " + " ".join(paths) + " 2>&1", check=False).stdout
        out[node] = listing
    return out


def file_contents(d: DaemonBed) -> dict[tuple[str, str], str]:
    """Content of every managed file on every node."""
    return {(node, path): d.bed.exec(node, f"cat {path}").stdout for node, paths in MANAGED.items() for path in paths}


def scrape(daemon: DaemonProcess) -> str:
    """GET /metrics from the address in the daemon's config."""
    listen = json.loads(daemon.config.read_text())["metrics_listen"]
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=10) as response:
        return response.read().decode()


def test_first_start_configures_cluster_and_commit_latency(dbed: DaemonBed) -> None:
    """From a bare testbed: the first cycle applies; a commit adding a partition is picked up within a poll and shows
    in sinfo when its run ends."""
    daemon = dbed.daemon(poll_interval="2s")
    try:
        daemon.wait_applied(dbed.remote.head(), timeout=180)
        assert {"debug", "batch"} <= partitions(dbed)
        head = dbed.remote.commit("add partition interactive", add_partition("interactive"))
        pushed = time.time()
        daemon.wait_applied(head)  # waits for the run's end too (applied_commit is written just before it)
        daemon.wait_for("partition in sinfo", lambda: "interactive" in partitions(dbed), timeout=60)
        # the runs table, not status()["last_run"]: a drift check of the same commit may be the last run by now
        run = daemon.runs(head)[0]
        assert run["outcome"] == "applied" and run["trigger"] == "poll", run
        picked_up, apply_seconds = run["started"] - pushed, run["ended"] - run["started"]
        print(f"\ncommit-to-applied latency (poll 2s, 2 compute nodes): {picked_up + apply_seconds:.2f}s "
              f"(picked up after {picked_up:.2f}s, applied in {apply_seconds:.2f}s)")
        assert picked_up <= 2.0 + 3.0, picked_up  # within a poll, plus the fetch and load of the commit
        metrics = scrape(daemon)
    finally:
        assert daemon.stop() < 30
    # the metrics of issue #5, scraped from the running daemon
    assert re.search(r"^reconciler_last_success_timestamp_seconds \d", metrics, re.M)
    assert re.search(r'^reconciler_reconcile_duration_seconds_count\{mode="enforce"\} [1-9]', metrics, re.M)
    assert f'reconciler_applied_commit_info{{commit="{head}"' in metrics
    assert re.search(r'^reconciler_drifted_resources\{driver="slurm_config",node="gpu01"\} 0\.0', metrics, re.M)
    for family in ("reconciler_check_ok", "reconciler_nccl_busbw_gbps", "reconciler_runs_total"):
        assert f"# TYPE {family} " in metrics


def test_broken_commit_is_reported_and_skipped_then_fix_applies(dbed: DaemonBed) -> None:
    """Invalid YAML: status names file:line, nodes unchanged; the next fixing commit applies by itself."""
    daemon = dbed.daemon()
    try:
        daemon.wait_applied(dbed.remote.head())
        before = file_hashes(dbed)
        good = dbed.remote.head()
        broken = dbed.remote.commit("typo", {"cluster.yaml": lambda t: t.replace("  partitions:\n",
                                                                                 "  partitions:\n    - nmae: oops\n", 1)})
        status = daemon.wait_for("invalid head", lambda: (s := daemon.status())["head"].get("commit") == broken
                                 and s["head"]["status"] == "invalid" and s)
        line = 1 + dbed.remote.work.joinpath("cluster.yaml").read_text().splitlines().index("    - nmae: oops")
        assert any(e.startswith(f"cluster.yaml:{line}:") and "partitions[0]" in e for e in status["head"]["errors"]), \
            status["head"]["errors"]
        assert status["applied_commit"] == good
        cli = subprocess.run([sys.executable, "-m", "reconciler.cli", "status", "--state-dir", str(daemon.state_dir)],
                             capture_output=True, text=True, cwd=REPO, timeout=60)
        assert f"cluster.yaml:{line}:" in cli.stdout and "invalid" in cli.stdout
        time.sleep(2.5)  # a few more polls: still nothing written
        assert file_hashes(dbed) == before
        add = add_partition("fixed")["cluster.yaml"]
        fixed = dbed.remote.commit("fix typo, add partition fixed",
                                   {"cluster.yaml": lambda t: add(t.replace("    - nmae: oops\n", "", 1))})  # type: ignore[operator]
        daemon.wait_applied(fixed)
        assert "fixed" in partitions(dbed)
    finally:
        daemon.stop()


def test_force_push_is_followed(dbed: DaemonBed) -> None:
    """A rewritten branch (force-push) is followed: the dropped commit's change is undone."""
    daemon = dbed.daemon()
    try:
        base = dbed.remote.head()
        daemon.wait_applied(base)
        dropped = dbed.remote.commit("add partition fpold", add_partition("fpold"))
        daemon.wait_applied(dropped)
        assert "fpold" in partitions(dbed)
        git(dbed.remote.work, "reset", "-q", "--hard", base)
        (dbed.remote.work / "cluster.yaml").write_text(
            add_partition("fpnew")["cluster.yaml"]((dbed.remote.work / "cluster.yaml").read_text()))  # type: ignore[operator]
        git(dbed.remote.work, "commit", "-qam", "rewritten: fpnew instead of fpold")
        git(dbed.remote.work, "push", "-q", "--force", "origin", "main")
        rewritten = dbed.remote.head()
        daemon.wait_applied(rewritten)
        shown = partitions(dbed)
        assert "fpnew" in shown and "fpold" not in shown
    finally:
        daemon.stop()


def test_report_mode_leaves_hand_edit_enforce_heals_it(dbed: DaemonBed) -> None:
    """report: a hand edit is reported and left in place; enforce: healed within the drift interval."""
    target = "/etc/slurm/prolog.sh"
    reporter = dbed.daemon(mode="report", drift_interval="2s")
    try:
        reporter.wait_applied(dbed.remote.head())
        original = dbed.bed.exec("gpu01", f"cat {target}").stdout
        dbed.bed.exec("gpu01", f"echo 'echo hand edit' >> {target}")
        status = reporter.wait_for("drift reported", lambda: (s := reporter.status())["drift"] and s, timeout=30)
        drift = status["drift"]
        assert [(d["node"], d["driver"], d["pending_commit"]) for d in drift] == [("gpu01", "patches", False)]
        time.sleep(4)  # two more drift checks
        assert "hand edit" in dbed.bed.exec("gpu01", f"cat {target}").stdout
        assert any(e["event"] == "drift.detected" and e.get("node") == "gpu01" for e in reporter.events())
    finally:
        reporter.stop()
    # the admin switches the same daemon (same state directory) to enforce
    enforcer = dbed.daemon(mode="enforce", drift_interval="3s", state_dir=str(reporter.state_dir))
    try:
        enforcer.wait_for("healed at start", lambda: dbed.bed.exec("gpu01", f"cat {target}").stdout == original,
                          timeout=30)
        # read from the journal, not status()["last_run"]: a drift check 3 s later replaces last_run
        enforcer.wait_for("start run applied", lambda: [e["outcome"] for e in enforcer.runs_ended("start")] == ["applied"], timeout=30)
        dbed.bed.exec("gpu02", f"echo 'echo another hand edit' >> {target}")
        edited = time.time()
        enforcer.wait_for("healed", lambda: dbed.bed.exec("gpu02", f"cat {target}").stdout == original, timeout=30)
        print(f"\nhand edit healed after {time.time() - edited:.1f}s (drift interval 3s)")

        # Healed by the drift check in flight at the edit (had it not gathered yet) or by the next one: counted in
        # drift checks, not seconds (two loaded drift checks of ~5 s each broke a bound of 3 + 10 s).
        def healer() -> int | None:
            checks = [r for r in enforcer.runs() if r["trigger"] == "drift-check"]
            at_edit = max(len([r for r in checks if r["started"] <= edited]) - 1, 0)
            return next((i for i, r in enumerate(checks[at_edit:]) if r["applied"] and r["ended"]), None)
        assert enforcer.wait_for("the healing run's end", lambda: (i := healer()) is not None and [i], 30) in ([0], [1])
        events = [e for e in enforcer.events() if e["event"] == "drift.detected"]
        assert {e["node"] for e in events} >= {"gpu01", "gpu02"}
    finally:
        enforcer.stop()


def test_sigkill_during_apply_then_restart_converges(dbed: DaemonBed) -> None:
    """SIGKILL while a rollout waits for a job: no partial file; the next start finishes the rollout."""
    daemon = dbed.daemon()
    daemon.wait_applied(dbed.remote.head())
    before = file_contents(dbed)
    job = dbed.bed.exec("ctl", "sbatch --parsable -w gpu01 -o /dev/null --wrap 'sleep 12'").stdout.strip()
    daemon.wait_for(f"job {job} running", lambda: dbed.bed.exec("ctl", f"squeue -h -j {job} -o %T",
                                                                check=False).stdout.strip() == "RUNNING", timeout=60)
    head = dbed.remote.commit("less RealMemory", {"cluster.yaml": lambda t: t.replace("RealMemory: 1000",
                                                                                      "RealMemory: 900", 1)})
    daemon.wait_for("rollout waiting", lambda: any("waiting for running jobs" in str(e.get("step", ""))
                                                   or "drain" in str(e.get("step", "")) for e in daemon.events()),
                    timeout=60)
    daemon.kill()
    during = file_contents(dbed)
    restarted = dbed.daemon(state_dir=str(daemon.state_dir))  # the same daemon, restarted (e.g. by systemd)
    try:
        restarted.wait_applied(head, timeout=120)
        restarted.wait_for("gpu01 updated and resumed", lambda: "RealMemory=900" in (
            out := dbed.bed.exec("ctl", "scontrol show node gpu01 -o").stdout) and "DRAIN" not in out, timeout=60)
        plan = subprocess.run([sys.executable, "-m", "reconciler.cli", "plan", str(restarted.state_dir / "repo")],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        assert plan.returncode == 0, plan.stdout + plan.stderr
    finally:
        restarted.stop()
    after = file_contents(dbed)
    assert after != before
    for key, text in during.items():
        assert text in (before[key], after[key]), f"{key} is neither the old nor the new file"
    assert any("interrupted_runs" in e and e["interrupted_runs"] == 1 for e in restarted.events())


def test_one_daemon_per_state_dir_sighup_reload_sigterm(dbed: DaemonBed) -> None:
    """A second daemon on the same state dir refuses; SIGHUP reloads the config; SIGTERM exits quickly."""
    daemon = dbed.daemon(mode="report")
    try:
        daemon.wait_applied(dbed.remote.head())
        second = subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--config", str(daemon.config)],
                                capture_output=True, text=True, cwd=REPO, timeout=60)
        assert second.returncode == 3 and "locked by another reconciler" in second.stderr
        daemon.config.write_text(daemon.config.read_text().replace('"report"', '"enforce"'))
        daemon.signal(signal.SIGHUP)
        daemon.wait_for("reload", lambda: any(e["event"] == "config.reloaded" and e["mode"] == "enforce"
                                              for e in daemon.events()), timeout=20)
    finally:
        assert daemon.stop() < 30
    assert daemon.proc is not None and daemon.proc.returncode == 0


def test_watch_mode_reconciles_on_change_debounced(dbed: DaemonBed, tmp_path: Path) -> None:
    """Local mode: saving YAML files (three quick writes) triggers one reconcile after the debounce."""
    local = tmp_path / "desired"
    local.mkdir()
    for path in dbed.remote.work.glob("*.yaml"):
        (local / path.name).write_bytes(path.read_bytes())
    daemon = dbed.daemon(repository=None, watch=str(local), debounce=1.0)
    try:
        daemon.wait_for("first run", lambda: (daemon.status()["last_run"] or {}).get("outcome") in ("in-sync",
                                                                                                    "applied"))
        cluster = local / "cluster.yaml"
        edit = add_partition("watched")["cluster.yaml"]
        saved = time.monotonic()
        text = cluster.read_text()
        cluster.write_text(text + "\n")
        cluster.write_text(edit(text))  # type: ignore[operator]
        (local / "nodes.yaml").write_text((local / "nodes.yaml").read_text() + "# touched\n")
        daemon.wait_for("partition in sinfo", lambda: "watched" in partitions(dbed), timeout=60)
        print(f"\nwatch mode: save-to-applied {time.monotonic() - saved:.2f}s (debounce 1s)")
        time.sleep(1.5)
        runs = [e for e in daemon.events() if e["event"] == "run.start" and e["trigger"] == "watch"]
        assert len(runs) == 1, runs
    finally:
        daemon.stop()


EPILOG = """\
  - name: epilog
    path: /etc/slurm/epilog.sh
    nodes: gpu[01-02]
    mode: "0755"
    validate: "sh -n %s"
    content: |
      #!/bin/sh
      {body}
"""


def test_failed_apply_retried_with_backoff_newer_commit_supersedes(dbed: DaemonBed) -> None:
    """A commit whose apply fails (file refused by its validate command) is retried with growing delays;
    a newer fixing commit is applied at once."""
    daemon = dbed.daemon(retry={"initial": "2s", "max": "8s"}, drift_interval="10m")
    try:
        daemon.wait_applied(dbed.remote.head())
        broken = dbed.remote.commit("epilog with a syntax error",
                                    {"patches.yaml": lambda t: t + EPILOG.format(body="if then fi")})
        daemon.wait_for("three failed attempts", lambda: len([r for r in daemon.events() if r["event"] == "run.end"
                                                              and r["commit"] == broken[:12]
                                                              and r["outcome"] == "failed"]) >= 3, timeout=60)
        ends = [e for e in daemon.events() if e["event"] == "run.retry_scheduled" and e["commit"] == broken]
        assert [e["in_seconds"] for e in ends[:3]] == [2.0, 4.0, 8.0]
        assert daemon.status()["applied_commit"] != broken
        assert "No such file" in dbed.bed.exec("gpu01", "cat /etc/slurm/epilog.sh 2>&1", check=False).stdout
        fixed = dbed.remote.commit("fix the epilog", {"patches.yaml": lambda t: t.replace("if then fi", "exit 0")})
        pushed = time.time()
        daemon.wait_applied(fixed, timeout=30)
        # not held back by the backoff of the broken commit (8 s by now): its run starts at the next poll (1 s,
        # plus the fetch and load); the apply's own time is not part of the bound
        picked_up = daemon.runs(fixed)[0]["started"] - pushed
        assert picked_up < 8, picked_up
        assert "exit 0" in dbed.bed.exec("gpu01", "cat /etc/slurm/epilog.sh").stdout
    finally:
        daemon.stop()


DAEMON_CHECKS = """\
checks:
  node:
    - name: daemons
      nodes: "gpu[01-02]"
      services: [munge, slurmd]
      interval: 1m
  nccl:
    - name: nccl
      nodes: "gpu[01-02]"
      mpi: pmi2
      ntasks_per_node: 2    # the testbed's nodes have 2 CPUs
      gpus_per_task: 1
      timeout: 2m
      schedule: 5s
      thresholds: {min_busbw: 330, at_size: 1G}
"""


def test_scheduled_checks_drain_and_resume_with_metrics(dbed: DaemonBed) -> None:
    """Checks committed to Git run on their schedule through srun (stand-in all_reduce_perf): the degraded
    node is drained with a reconciler: reason, shown by status and metrics, and resumed once it passes."""
    dbed.bed.exec("gpu02", "mkdir -p /etc/reconciler-standin && touch /etc/reconciler-standin/degraded")
    daemon = dbed.daemon()
    try:
        daemon.wait_applied(dbed.remote.head())
        dbed.remote.commit("nccl and daemon checks", {"checks.yaml": lambda _: DAEMON_CHECKS})

        def reason(node: str) -> str:
            return dbed.bed.exec("ctl", f"scontrol show node {node} -o").stdout

        daemon.wait_for("gpu02 drained by the nccl check", lambda: "Reason=reconciler: nccl nccl:" in reason("gpu02"),
                        timeout=120)
        assert "all_reduce busbw 120.5 < 330 GB/s" in reason("gpu02")  # the degraded replay at the default 4 GiB and "DRAIN" not in reason("gpu01")
        failing = daemon.wait_for("failing check in status", lambda: daemon.status()["failing_checks"], timeout=30)
        assert [(c["check"], c["node"]) for c in failing] == [("nccl", "gpu02")]
        # the gauges are set after the check's results are stored (and gpu02 drained): wait for the series
        series = ('reconciler_check_ok{check="nccl",node="gpu02"}', 'reconciler_check_ok{check="daemons",node="gpu01"}',
                  'reconciler_nccl_busbw_gbps{check="nccl",node="gpu01"}', 'reconciler_check_gpu_seconds_total{check="nccl"}')
        metrics = daemon.wait_for("the checks' gauges", lambda: (m := scrape(daemon)) and all(
            f"{name} " in m for name in series) and m, timeout=30)
        assert 'reconciler_check_ok{check="nccl",node="gpu02"} 0.0' in metrics
        assert 'reconciler_check_ok{check="daemons",node="gpu01"} 1.0' in metrics
        assert re.search(r'reconciler_nccl_busbw_gbps\{check="nccl",node="gpu01"\} 365\.09', metrics), metrics
        gpu_seconds = re.search(r'^reconciler_check_gpu_seconds_total\{check="nccl"\} (\S+)$', metrics, re.M)
        assert gpu_seconds and float(gpu_seconds.group(1)) > 0, metrics
        dbed.bed.exec("gpu02", "rm /etc/reconciler-standin/degraded")
        daemon.wait_check_passes("nccl", "gpu02")  # not merely "no DRAIN": a retest resumes it for a while
        daemon.wait_for("gpu02 resumed", lambda: "DRAIN" not in reason("gpu02"), timeout=60)
        daemon.wait_for("status clear", lambda: not daemon.status()["failing_checks"], timeout=30)
    finally:
        dbed.bed.exec("gpu02", "rm -f /etc/reconciler-standin/degraded")
        dbed.remote.commit("no scheduled checks", {"checks.yaml": lambda _: "checks: {}\n"})
        daemon.stop()


GPU_CHECKS = """\
checks:
  node:
    - name: gpu-health
      nodes: "gpu[01-02]"
      interval: 5s
      gpus: {count: 8, model: H200, driver: "580.", pcie: {gen: 5, width: 16}, nvlinks: 18}
"""


def first_check_runs_after(daemon: DaemonProcess, seen: int) -> list[dict[str, bool]]:
    """Each check run that started after the daemon's first SEEN log lines: node -> ok of its check.result lines
    (the results of a run that started before are left out)."""
    runs: list[dict[str, bool]] = []
    for event in daemon.events()[seen:]:
        if event.get("event") == "checks.start":
            runs.append({})
        elif event.get("event") == "check.result" and runs:
            runs[-1][str(event.get("node"))] = bool(event.get("ok"))
    return [run for run in runs if run]


def test_daemon_drains_an_xid_79_within_one_check_interval_and_resumes(dbed: DaemonBed) -> None:
    """Issue 23 through the daemon: the stand-in replays an XID 79 on gpu02; the next scheduled check drains it
    `reconciler: gpu 3 xid 79 (fallen off the bus)` (metric, status page), gpu01 stays up; the healthy replay
    resumes it."""
    faults = "/etc/reconciler-standin/gpu-faults"
    daemon = dbed.daemon()

    def line(node: str) -> str:
        return dbed.bed.exec("ctl", f"scontrol show node {node} -o").stdout

    try:
        daemon.wait_applied(dbed.remote.head())
        dbed.remote.commit("gpu health every 5s", {"checks.yaml": lambda _: GPU_CHECKS})
        daemon.wait_for("gpu checks pass", lambda: 'reconciler_check_ok{check="gpu-health",node="gpu02"} 1.0'
                        in scrape(daemon), timeout=60)
        dbed.bed.exec("gpu02", f"mkdir -p /etc/reconciler-standin && echo 'xid79 3' > {faults}")
        planted, seen = time.monotonic(), len(daemon.events())
        daemon.wait_for("gpu02 drained", lambda: "Reason=reconciler: gpu 3 xid 79 (fallen off the bus)" in line("gpu02"),
                        timeout=60)
        print(f"\nXID 79 planted -> gpu02 drained in {time.monotonic() - planted:.1f}s (check interval 5s)")
        # the promise is "the next scheduled check", not a number of seconds (a loaded login node runs it later):
        # the first check run that started after the fault was planted found it (one in flight then may have too)
        runs = first_check_runs_after(daemon, seen)
        assert runs and runs[0]["gpu02"] is False, runs
        assert "DRAIN" not in line("gpu01")
        daemon.wait_for("the fault's metric", lambda: 'reconciler_gpu_fault{gpu="3",kind="xid",node="gpu02"} 1.0'
                        in scrape(daemon), timeout=30)
        metrics = scrape(daemon)
        assert 'node="gpu01"' not in "".join(m for m in metrics.splitlines() if m.startswith("reconciler_gpu_fault"))
        listen = json.loads(daemon.config.read_text())["metrics_listen"]
        with urllib.request.urlopen(f"http://{listen}/", timeout=10) as response:
            page = response.read().decode()
        assert "gpu 3 xid 79 (fallen off the bus)" in page
        dbed.bed.exec("gpu02", f": > {faults}")
        daemon.wait_for("gpu02 resumed", lambda: "DRAIN" not in line("gpu02"), timeout=60)
        daemon.wait_for("fault metric gone", lambda: "reconciler_gpu_fault{" not in scrape(daemon), timeout=30)
    finally:
        dbed.bed.exec("gpu02", f"rm -f {faults}")
        dbed.remote.commit("no scheduled checks", {"checks.yaml": lambda _: "checks: {}\n"})
        daemon.stop()


def test_daemon_keeps_one_pr_comment_current(dbed: DaemonBed, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forge configured: the daemon plans an open PR against its live facts and edits one comment per push;
    the PR is never applied and the token never logged."""
    from tests.forge.fake_github import FakeGitHub

    token = "ghp_daemonTestToken0123456789"
    monkeypatch.setenv("RECONCILER_TEST_FORGE_TOKEN", token)
    fake = FakeGitHub(token=token)
    work = dbed.remote.work
    with fake.running():
        # a 2 s drift check: PRs are planned against the facts of a no-op cycle, which a bed this test's own
        # daemon has just converged only gets from the next cycle (run alone, no earlier test converged it)
        daemon = dbed.daemon(forge={"type": "github", "url": fake.base_url, "repo": "acme/cluster",
                                    "token_env": "RECONCILER_TEST_FORGE_TOKEN", "interval": "1s"},
                             drift_interval="2s")
        try:
            daemon.wait_applied(dbed.remote.head())
            shas = []
            for name in ("prone", "prtwo"):
                git(work, "checkout", "-q", "-B", "feature", "main")
                (work / "cluster.yaml").write_text(add_partition(name)["cluster.yaml"](  # type: ignore[operator]
                    (work / "cluster.yaml").read_text()))
                git(work, "commit", "-qam", f"PR: partition {name}")
                git(work, "push", "-q", "--force", "origin", "HEAD:refs/pull/7/head")
                shas.append(git(work, "rev-parse", "HEAD"))
                git(work, "checkout", "-q", "main")
                fake.add_pull(7, shas[-1], head_ref="feature")
                daemon.wait_for("comment with the PR head", lambda: any(shas[-1][:12] in c["body"]
                                                                     for c in fake.comments_on(7)), timeout=60)
            comments = fake.comments_on(7)
            assert len(comments) == 1
            body = comments[0]["body"]
            assert "<!-- reconciler:plan -->" in body and "prtwo" in body and shas[0][:12] not in body
            assert "PartitionName=prtwo" in body and "scontrol reconfigure" in body
            assert "prone" not in partitions(dbed) and "prtwo" not in partitions(dbed)
        finally:
            daemon.stop()
        assert token not in daemon.log_path.read_text()
