"""Progressive rollouts on a real testbed: how fast a bad commit is rolled back, and what gated waves cost.

For each N a bare testbed (N compute nodes + ctl, real Slurm) gets the desired state of bench/rollout_state.py
(the engine tests' state with `Prolog=/etc/slurm/prolog.sh`) from a real bare Git repository, and one
`reconciler run` (enforce, 1 s polls) configures it (Slurm does not answer yet: one ungated bootstrap wave) and
then takes every commit the bench pushes:

- good commit: the same change (a managed file on every compute node, new content) pushed with `rollout: {waves:
  all}` (one shot, no gates) and with the progressive rollout (canary 1, then 50%, then 100%, each wave gated by
  the smoke job, soak 0 s, NCCL gate off); push -> applied for each, the difference is what the gates add.
- bad commit: the prolog patch's script exits 1. The canary's smoke job fails (Slurm drains the canary with
  "Prolog error"), the canary is rolled back and resumed. Push -> rolled back, gate failed -> rollback complete,
  and every node's prolog read back.

Times come from the daemon's own records (`reconciler history --format json`: each run's started/ended, and for a
progressive rollout its record: each wave's started/applied_at/ended, gate seconds, the rollback's started/ended;
time.time() on this machine, the clock of the push). push -> applied is the end of the run that applied the commit
(both modes end their run the same way; a one-shot apply has no rollout record);
`reconciler status --format json` is polled as an admin would, and what it showed when is reported beside them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.common import REPO, load_average, log, median, python_env, reconciler_argv
from bench.rollout_state import (
    DEFAULT_SOAK_S,
    GOOD_PROLOG,
    MANAGED,
    PROLOG,
    ROLLOUT_ALL,
    ROLLOUT_PROGRESSIVE,
    Edit,
    files_yaml,
    prolog_patch,
    replace,
    write_state,
)
from bench.testbed import BenchTestbed
from reconciler.common import hostlist

POLL_INTERVAL = "1s"
STATUS_POLL = 0.5  # seconds between two `reconciler status` calls while waiting
CLUSTER_NAME = "bnroll"  # the tests' testbeds use rtrol/rteng
INDEX = 50  # testbed bench<pid>x50, x51 ... on 10.252.x (bench/testbed.py), not the tests' 10.251.x
TARGET_ROLLBACK_S = 60.0  # rollback complete <= 60 s after the gate fails
TARGET_GATE_S = 20.0  # gates add <= 20 s per wave at 16 nodes (NCCL gate off)
TARGET_GATE_N = 16
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.org", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.org"}
T = TypeVar("T")


def git_out(cwd: Path, *args: str) -> str:
    """git ARGS in CWD (the bench's identity), its stdout stripped; a failure raises."""
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
                         env={**os.environ, **GIT_ENV})
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


class RolloutTestbed(BenchTestbed):
    """A bare testbed with the rollout state of bench/rollout_state.py; the daemon configures it, not `apply`."""

    @property
    def compute_nodes(self) -> list[str]:
        """The compute nodes, gpu01...."""
        return self.nodes[1:]

    @property
    def computes_hostlist(self) -> str:
        """The compute nodes as a hostlist (gpu[01-16])."""
        return hostlist.compress(self.compute_nodes)

    def up(self) -> None:
        """Bring the testbed up bare and write its desired state (nothing applied yet)."""
        self.launch()
        write_state(self.desired, name=CLUSTER_NAME, state_dir=self.state_dir, subnet=self.subnet,
                    computes=self.computes_hostlist)

    def on_all(self, command: str) -> dict[str, str]:
        """COMMAND's stdout (stripped) on every compute node, run in parallel through nsenter."""
        with ThreadPoolExecutor(max_workers=8) as pool:
            outs = pool.map(lambda node: self.exec(node, command).stdout.strip(), self.compute_nodes)
            return dict(zip(self.compute_nodes, outs, strict=True))

    def drained(self) -> dict[str, str]:
        """Drained/draining compute nodes and their reasons, from sinfo on ctl."""
        out = self.exec("ctl", "sinfo -h -N -R -o '%N|%E'").stdout
        return {n: r for line in out.splitlines() if "|" in line for n, r in [line.split("|", 1)]}

    def wait_idle(self, timeout: float = 180.0) -> None:
        """Wait until sinfo on ctl shows every compute node idle."""
        cmd = "sinfo -h -N -o '%N %t'"
        script = (f"end=$(( $(date +%s) + {int(timeout)} )); while [ $(date +%s) -lt $end ]; do "
                  f"[ -z \"$({cmd} | grep -v ' idle$')\" ] && [ -n \"$({cmd})\" ] && exit 0; sleep 0.2; done; "
                  f"{cmd}; exit 1")
        done = self.exec("ctl", script, timeout=timeout + 30)
        if done.returncode != 0:
            raise RuntimeError(f"compute nodes not idle after {timeout:.0f} s:\n{done.stdout[-2000:]}")


@dataclass
class Remote:
    """A bare Git repository (the daemon's remote) and the bench's clone of it."""

    bare: Path
    work: Path

    @classmethod
    def create(cls, root: Path, files: Path) -> Remote:
        """A bare repository whose first commit holds the desired-state directory FILES."""
        bare, work = root / "cluster.git", root / "admin"
        git_out(root, "init", "-q", "--bare", "-b", "main", str(bare))
        shutil.copytree(files, work)
        git_out(work, "init", "-q", "-b", "main")
        git_out(work, "add", "-A")
        git_out(work, "commit", "-qm", "initial desired state")
        git_out(work, "remote", "add", "origin", str(bare))
        git_out(work, "push", "-q", "origin", "main")
        return cls(bare, work)

    def commit(self, message: str, edits: dict[str, Edit]) -> tuple[str, float]:
        """Edit files (name -> text transform), commit and push; the new commit and when the push returned."""
        for name, edit in edits.items():
            path = self.work / name
            path.write_text(edit(path.read_text() if path.exists() else ""))
        git_out(self.work, "add", "-A")
        git_out(self.work, "commit", "-qm", message)
        git_out(self.work, "push", "-q", "origin", "main")
        pushed = time.time()
        return git_out(self.work, "rev-parse", "HEAD"), pushed


@dataclass
class Daemon:
    """`reconciler run` (enforce, 1 s polls) on the remote, as a subprocess logging JSON lines."""

    bed: RolloutTestbed
    remote: Remote
    state_dir: Path = field(init=False)
    log_path: Path = field(init=False)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.state_dir = self.bed.work / "daemon-state"
        self.log_path = self.bed.work / "daemon.log"

    def start(self) -> Daemon:
        """Write the config and start the daemon."""
        config = self.bed.work / "daemon.yaml"
        config.write_text(json.dumps({"repository": {"url": str(self.remote.bare), "branch": "main"},
                                      "mode": "enforce", "poll_interval": POLL_INTERVAL, "drift_interval": "1h",
                                      "state_dir": str(self.state_dir), "metrics_listen": None,
                                      "log_format": "json", "retry": {"initial": "2s", "max": "10s"},
                                      "checks_after_apply": False}, indent=2))
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(reconciler_argv("run", "--config", str(config)), cwd=REPO, env=python_env(),
                                         stdout=out, stderr=out)
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in 40 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _cli(self, *args: str) -> Any:
        out = subprocess.run(reconciler_argv(*args, "--state-dir", str(self.state_dir), "--format", "json"),
                             cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=120, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"reconciler {args[0]}: {out.stderr.strip()[-500:]}")
        return json.loads(out.stdout)

    def status(self) -> dict[str, Any]:
        """`reconciler status --format json` ({} before the daemon created its database)."""
        return self._cli("status") if (self.state_dir / "state.db").exists() else {}

    def run_of(self, commit: str) -> dict[str, Any]:
        """The newest finished run of COMMIT, from `reconciler history --format json -n 50` (its "rollout" record
        is None for a one-shot apply: `waves: all` goes through the plain apply, not the rollout runner)."""
        runs = self._cli("history", "-n", "50")
        found = [r for r in runs if r.get("commit") == commit and r.get("ended")
                 and (r.get("rollout") or r.get("outcome") == "applied")]
        if not found:
            raise RuntimeError(f"no finished run of {commit[:12]} in the history")
        return found[0]

    def rollout_of(self, commit: str) -> dict[str, Any]:
        """The newest rollout record of COMMIT."""
        record = self.run_of(commit).get("rollout")
        if not record:
            raise RuntimeError(f"the run of {commit[:12]} has no rollout record")
        return dict(record)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the daemon's log."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait(self, what: str, predicate: Callable[[], T | None], timeout: float) -> tuple[T, float]:
        """Poll PREDICATE until it gives a value; the value and when it was seen (time.time())."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value, time.time()
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited ({self.proc.returncode}) waiting for {what}:\n{self.log_tail()}")
            time.sleep(STATUS_POLL)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}; daemon log:\n{self.log_tail()}")

    def wait_applied(self, commit: str, timeout: float = 300.0) -> float:
        """Wait until status says COMMIT is applied; when that was seen."""
        return self.wait(f"{commit[:12]} applied", lambda: self.status().get("applied_commit") == commit, timeout)[1]

    def wait_rolled_back(self, commit: str, timeout: float = 300.0) -> tuple[dict[str, Any], float]:
        """Wait until status lists COMMIT as rolled back; its record and when it was seen."""
        return self.wait(f"{commit[:12]} rolled back",
                         lambda: (self.status().get("rolled_back") or {}).get(commit), timeout)


def _wave_figures(record: dict[str, Any]) -> dict[str, Any]:
    """Per wave of a rollout record: nodes, seconds from start to end, to applied, and in gates."""
    timeline = record["timeline"]
    return {"waves": len(timeline), "wave_nodes": [w["nodes"] for w in timeline],
            "wave_s": [round(w["ended"] - w["started"], 2) for w in timeline],
            "apply_s": [round(w["applied_at"] - w["started"], 2) for w in timeline],
            "gate_s": [round(sum(g["seconds"] for g in w.get("gates", [])), 2) for w in timeline],
            "soak_s": [round((w.get("soak") or {}).get("seconds", 0.0), 2) for w in timeline]}


def good_push(bed: RolloutTestbed, remote: Remote, daemon: Daemon, mode: str, content: str) -> dict[str, Any]:
    """Push the managed-file change with MODE's rollout ('one-shot' or 'progressive'); time it to applied."""
    rollout = ROLLOUT_ALL if mode == "one-shot" else ROLLOUT_PROGRESSIVE
    commit, pushed = remote.commit(f"{mode}: {MANAGED} = {content}", {
        "rollout.yaml": replace(rollout), "files.yaml": files_yaml(content, bed.computes_hostlist)})
    seen = daemon.wait_applied(commit)
    run = daemon.run_of(commit)
    record = run.get("rollout")
    if run["outcome"] != "applied" or (mode == "progressive") != bool(record):
        raise RuntimeError(f"{mode} run of a good commit: outcome {run['outcome']}, rollout record "
                           f"{'present' if record else 'absent'}: {run.get('error')}")
    if record and record["status"] != "complete":
        raise RuntimeError(f"{mode} rollout of a good commit ended {record['status']}: {record.get('reason')}")
    on_nodes = set(bed.on_all(f"cat {MANAGED}").values())
    if on_nodes != {content}:
        raise RuntimeError(f"{mode}: {MANAGED} on the nodes is {on_nodes}, not {content!r}")
    one_wave = {"waves": 1, "wave_nodes": [bed.computes_hostlist], "wave_s": [], "apply_s": [], "gate_s": [0.0],
                "soak_s": []}
    figures: dict[str, Any] = _wave_figures(record) if record else one_wave
    row = {"mode": mode, "push_to_applied_s": round(run["ended"] - pushed, 2),
           "push_to_status_s": round(seen - pushed, 2), "push_to_run_s": round(run["started"] - pushed, 2),
           "run_s": round(run["ended"] - run["started"], 2), **figures}
    if record:
        row["last_wave_end_to_run_end_s"] = round(run["ended"] - record["timeline"][-1]["ended"], 2)
    log(f"rollout N={bed.computes} {mode}: push -> applied {row['push_to_applied_s']:.2f} s "
        f"(run {row['run_s']:.2f} s; {figures['waves']} wave(s) {', '.join(figures['wave_nodes'])}; "
        f"gates {figures['gate_s']} s)")
    return row


def bad_push(bed: RolloutTestbed, remote: Remote, daemon: Daemon, run: int) -> dict[str, Any]:
    """Push a prolog that exits 1; time the rollback and read every node's prolog back; then revert in Git."""
    before = bed.on_all(f"cat {PROLOG}")
    commit, pushed = remote.commit(f"prolog that fails ({run})", {
        "rollout.yaml": replace(ROLLOUT_PROGRESSIVE),
        "patches.yaml": prolog_patch(f"#!/bin/sh\necho bench run {run}: no >&2\nexit 1")})
    marked, seen = daemon.wait_rolled_back(commit)
    after = bed.on_all(f"cat {PROLOG}")
    verified = time.time()
    record = daemon.rollout_of(commit)
    back = record.get("rollback") or {}
    failed_wave = next(w for w in record["timeline"] if w["wave"] == record["failed_wave"])
    gate_failed = failed_wave["ended"]  # the failed wave ends when its gate fails (no soak after a failure)
    wrong = sorted(n for n in bed.compute_nodes if after[n] != before[n])
    drained = bed.drained()
    row = {"status": record["status"], "failed_gate": marked.get("gate"), "failed_nodes": marked.get("nodes"),
           "reverted": back.get("nodes"), "resumed": back.get("resumed", []), "rollback_ok": bool(back.get("ok")),
           "push_to_gate_failed_s": round(gate_failed - pushed, 2),
           "failed_gate_s": (record.get("failed_gate") or {}).get("seconds"),
           "gate_failed_to_rollback_s": round(back["ended"] - gate_failed, 2),
           "rollback_s": round(back["ended"] - back["started"], 2),
           "push_to_rolled_back_s": round(back["ended"] - pushed, 2),
           "push_to_status_s": round(seen - pushed, 2), "push_to_verified_s": round(verified - pushed, 2),
           "nodes_checked": len(after), "nodes_not_old": wrong, "drained_after": drained}
    log(f"rollout N={bed.computes} bad commit {run + 1}: gate {row['failed_gate']} failed on {row['failed_nodes']} "
        f"{row['push_to_gate_failed_s']:.2f} s after the push; rolled back {row['gate_failed_to_rollback_s']:.2f} s "
        f"later; every node's prolog checked at push + {row['push_to_verified_s']:.2f} s "
        f"({'all old' if not wrong else 'NOT old: ' + hostlist.compress(wrong)})")
    fixed, _ = remote.commit("prolog back to the good one", {"patches.yaml": prolog_patch(GOOD_PROLOG)})
    daemon.wait_applied(fixed)
    bed.wait_idle()
    return row


def _per_index(series: list[list[float]]) -> list[float]:
    """The median of each position over runs (lists of the same length)."""
    return [round(median([s[i] for s in series]), 2) for i in range(min(len(s) for s in series))] if series else []


def good_row(computes: int, one_shot: list[dict[str, Any]], progressive: list[dict[str, Any]]) -> dict[str, Any]:
    """The table row of the good commit at one N: medians, paired differences, gate seconds per wave."""
    added = [p["push_to_applied_s"] - o["push_to_applied_s"] for o, p in zip(one_shot, progressive, strict=True)]
    waves = progressive[0]["waves"]
    gates = _per_index([p["gate_s"] for p in progressive])
    return {"scenario": "good", "computes": computes, "runs": len(added),
            "one_shot_s": round(median([o["push_to_applied_s"] for o in one_shot]), 2),
            "progressive_s": round(median([p["push_to_applied_s"] for p in progressive]), 2),
            "added_s": round(median(added), 2), "waves": waves, "wave_nodes": progressive[0]["wave_nodes"],
            "added_per_wave_s": round(median(added) / waves, 2), "gate_s_per_wave": gates,
            "wave_s_per_wave": _per_index([p["wave_s"] for p in progressive]),
            "max_gate_s": max((max(p["gate_s"]) for p in progressive), default=0.0),
            "soak_s": 0, "default_soak_s": DEFAULT_SOAK_S, "default_soak_adds_s": DEFAULT_SOAK_S * (waves - 1),
            "one_shot_runs_s": [o["push_to_applied_s"] for o in one_shot],
            "progressive_runs_s": [p["push_to_applied_s"] for p in progressive],
            "added_runs_s": [round(a, 2) for a in added],
            "one_shot_status_s": round(median([o["push_to_status_s"] for o in one_shot]), 2),
            "progressive_status_s": round(median([p["push_to_status_s"] for p in progressive]), 2),
            "detail": {"one_shot": one_shot, "progressive": progressive}}


def rollback_row(computes: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The table row of the bad commit at one N: medians over runs, the worst gate-failed -> rolled-back."""
    def med(key: str) -> float:
        return round(median([r[key] for r in runs]), 2)

    return {"scenario": "rollback", "computes": computes, "runs": len(runs),
            "push_to_gate_failed_s": med("push_to_gate_failed_s"),
            "gate_failed_to_rollback_s": med("gate_failed_to_rollback_s"),
            "max_gate_failed_to_rollback_s": max(r["gate_failed_to_rollback_s"] for r in runs),
            "rollback_s": med("rollback_s"), "push_to_rolled_back_s": med("push_to_rolled_back_s"),
            "push_to_status_s": med("push_to_status_s"), "push_to_verified_s": med("push_to_verified_s"),
            "all_nodes_old": all(not r["nodes_not_old"] for r in runs), "nodes_checked": runs[0]["nodes_checked"],
            "all_ok": all(r["status"] == "rolled-back" and r["rollback_ok"] and not r["drained_after"] for r in runs),
            "failed_gate": runs[0]["failed_gate"], "failed_nodes": runs[0]["failed_nodes"],
            "gate_failed_to_rollback_runs_s": [r["gate_failed_to_rollback_s"] for r in runs], "detail": runs}


def measure(computes: int, index: int, runs: int) -> list[dict[str, Any]]:
    """Bring up one testbed, configure it through the daemon, measure good and bad commits; always tear down."""
    load_before = load_average()
    started = time.monotonic()
    with RolloutTestbed(computes, index) as bed:
        remote = Remote.create(bed.work, bed.desired)
        daemon = Daemon(bed, remote).start()
        try:
            configured = time.monotonic()
            daemon.wait_applied(git_out(remote.work, "rev-parse", "HEAD"), timeout=1200)
            bed.wait_idle()
            log(f"rollout N={computes}: configured by the daemon in {time.monotonic() - configured:.1f} s")
            if set(bed.on_all(f"cat {PROLOG}").values()) != {GOOD_PROLOG.strip()} or bed.drained():
                raise RuntimeError(f"testbed not ready: prolog or drains wrong ({bed.drained()})")
            good_push(bed, remote, daemon, "one-shot", "setting = warm-up")  # the file exists before any figure
            bed.wait_idle()
            one_shot: list[dict[str, Any]] = []
            progressive: list[dict[str, Any]] = []
            for run in range(runs):  # alternate which mode goes first
                for mode in ("one-shot", "progressive") if run % 2 == 0 else ("progressive", "one-shot"):
                    row = good_push(bed, remote, daemon, mode, f"setting = {mode} {run}")
                    (one_shot if mode == "one-shot" else progressive).append(row)
                    bed.wait_idle()
            bad = [bad_push(bed, remote, daemon, run) for run in range(runs)]
        finally:
            daemon.stop()
    rows = [good_row(computes, one_shot, progressive), rollback_row(computes, bad)]
    for row in rows:
        row["load"] = {"before": load_before, "after": load_average()}
        row["testbed_s"] = round(time.monotonic() - started, 1)
    return rows


def run(nodes: list[int], runs: int, skipped: dict[str, str]) -> list[dict[str, Any]]:
    """Measure at each N (a failing N is recorded in SKIPPED with the reason and the others still run)."""
    rows: list[dict[str, Any]] = []
    for offset, computes in enumerate(nodes):
        log(f"rollout: N={computes}, {runs} run(s)")
        try:
            rows.extend(measure(computes, INDEX + offset, runs))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            log(f"rollout N={computes} failed: {exc}")
            skipped[f"rollout N={computes}"] = str(exc).splitlines()[0][:300]
    return rows


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """The issue's rollout targets, where measured: (sentence, held)."""
    found = []
    for row in rows:
        n = row["computes"]
        if row["scenario"] == "rollback":
            worst = row["max_gate_failed_to_rollback_s"]
            found.append((f"rollout N={n}: rollback complete {worst:.1f} s after the gate failed (worst of "
                          f"{row['runs']}; target <= {TARGET_ROLLBACK_S:.0f} s); every node's prolog back: "
                          f"{'yes' if row['all_nodes_old'] else 'NO'}; rolled back cleanly, no drain left: "
                          f"{'yes' if row['all_ok'] else 'NO'}",
                          worst <= TARGET_ROLLBACK_S and row["all_nodes_old"] and row["all_ok"]))
        elif n == TARGET_GATE_N:
            found.append((f"rollout N={n}: gated waves add {row['added_per_wave_s']:.1f} s per wave "
                          f"({row['added_s']:.1f} s over {row['waves']} waves), the slowest wave's gates "
                          f"{row['max_gate_s']:.1f} s (target <= {TARGET_GATE_S:.0f} s per wave, NCCL gate off)",
                          row["added_per_wave_s"] <= TARGET_GATE_S and row["max_gate_s"] <= TARGET_GATE_S))
    return found
