"""A reboot-aware rolling upgrade on a real testbed (issue 34): the driver STAND-IN pair 550 -> 570, `needs: reboot`.

One testbed of N compute nodes + ctl (`testbed up --packages`: real Slurm 22.05, real apt/dpkg, the testbed's own
repository on ctl; the packages nvidia-driver-standin and nvidia-fabricmanager-standin are stand-ins whose driver
the stand-in nvidia-smi reports once loaded at boot; the reboot is Slurm's `scontrol reboot` through the testbed's
RebootProgram and host-side keeper, see deploy/testbed/README.md). `reconciler run` (enforce, 1 s polls) follows a
bare Git repository:

1. the testbed's desired state with the pair at 550 (installed by the daemon, no reboot asked);
2. the pair at 570 with `needs: reboot` and `rollout.upgrade: {max_unavailable: 4, gates: [gpu], driver_package:
   nvidia-driver-standin}` in one rollout wave of every node (no rollout gates, soak 0 s): the daemon drains,
   installs, reboots through Slurm, waits for the new boot id and slurmd, gates (nvidia-smi must report 570) and
   resumes, node by node, at most 4 out at a time.

What is measured: per node the time it entered each state, from the daemon's log (`rollout.step` "upgrade: NODE:
STATE", logged right after the machine journals the state, so no transition is missed); the upgrade's journal
(`record["upgrade"]`) is also read every POLL_S s through a read-only SQLite connection, as `status` reads it (a
state shorter than a poll is not seen there: `journal_states_seen` against `log_states`). Reboot wait = rebooting
-> validating (reboot asked -> new boot id and slurmd registered); per node = draining -> done; a "wave" is the
i-th group of max_unavailable nodes in the order they started (the machine may start a node as soon as another
finishes, so waves can overlap; their spans are reported as measured). Total = push -> the run that applied the
commit ended. Afterwards every node's dpkg version and nvidia-smi's reported driver are read back.
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
import shutil
import subprocess
import threading
import time
from functools import cmp_to_key
from pathlib import Path
from typing import Any

from bench.common import REPO, log, median, python_env, reconciler_argv
from bench.rollout import Daemon, Remote, RolloutTestbed, git_out
from bench.tables import Table
from bench.testbed import TESTBED, timed_run
from reconciler.common.versions import deb_compare
from reconciler.daemon.upgrade_view import STATES, current, state_order

DRIVER, FM = "nvidia-driver-standin", "nvidia-fabricmanager-standin"
INDEX = 56  # bench testbeds of bench/rollout.py use 50...; 10.252.x, not the tests' 10.251.x
MAX_UNAVAILABLE = 4
POLL_S = 0.2
UPGRADE_TIMEOUT_S = 1800.0


class UpgradeTestbed(RolloutTestbed):
    """A full testbed (Slurm running) with the package repository; its own desired state, applied by the daemon."""

    def launch(self) -> Path:
        """`testbed up --packages` (full profile: Slurm up); return the desired state it wrote."""
        log(f"testbed {self.name}: up --packages --nodes {self.computes} --subnet {self.subnet}")
        up = timed_run([str(TESTBED), "up", "--packages", "--nodes", str(self.computes), "--name", self.name,
                        "--subnet", self.subnet], timeout=1800)
        if up.returncode != 0:
            raise RuntimeError(f"testbed up --packages failed:\n{up.tail()}")
        log(f"testbed {self.name}: up in {up.seconds:.1f} s")
        return Path(up.stdout.strip().splitlines()[-1])

    def up(self) -> None:
        """Bring the testbed up and copy its desired state (the daemon applies it)."""
        from bench.testbed import track

        track(self.name)
        shutil.copytree(self.launch(), self.desired)

    def exec(self, node: str, command: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """As BenchTestbed.exec, the node's PID 1 read again at each call (a reboot gives the node a new one)."""
        self._pids = {}
        return super().exec(node, command, timeout)

    def versions(self) -> list[str]:
        """The stand-in driver's versions in the repository, oldest first (manifest.json)."""
        manifest = json.loads((self.state_dir / "packages" / "manifest.json").read_text())
        found = manifest["deb"]["standin"][DRIVER]
        if manifest["deb"]["standin"][FM] != found or len(found) < 2:
            raise RuntimeError(f"stand-in pair not in lockstep or one version only: {manifest['deb']['standin']}")
        return sorted(found, key=cmp_to_key(deb_compare))

    def reported(self) -> dict[str, str]:
        """What the stand-in nvidia-smi reports as the driver on each compute node."""
        return self.on_all("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -1")

    def installed(self) -> dict[str, str]:
        """dpkg's version of the stand-in driver on each compute node."""
        return self.on_all(f"dpkg-query -W -f '${{Version}}' {DRIVER} 2>/dev/null")


def packages_yaml(version: str, nodes: str, needs: bool) -> str:
    """packages.yaml: the stand-in pair at VERSION on NODES (the driver held), `needs: reboot` or not."""
    driver = f'{{version: "{version}", hold: true{", needs: reboot" if needs else ""}}}'
    return (f'packages:\n  - nodes: "{nodes}"\n    allow_downgrade: true\n    packages:\n'
            f'      {DRIVER}: {driver}\n      {FM}: "{version}"\n')


def rollout_yaml(max_unavailable: int) -> str:
    """rollout.yaml: one wave of every node with no rollout gates (the upgrade's own gate is what is timed), and
    the changes needing a reboot node by node in it, gated by the GPU check (`waves: all` is a plain apply, which
    holds them)."""
    return ("rollout:\n  waves: progressive\n  canary: 100%\n  steps: [100%]\n  soak: 0s\n"
            "  gates: {node_checks: false, smoke_job: false, nccl: false}\n  upgrade:\n"
            f"    max_unavailable: {max_unavailable}\n    failure_budget: 0\n    drain_timeout: 10m\n"
            f"    reboot_timeout: 5m\n    driver_package: {DRIVER}\n    gates: [gpu]\n")


class JournalWatch:
    """Reads record["upgrade"] from the state database every POLL_S s: per node, when it entered each state."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.entered: dict[str, dict[str, float]] = {}  # node -> state -> its `since`
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="upgrade-watch")

    def __enter__(self) -> JournalWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        from reconciler.daemon.store import JOURNAL_KEY, Store

        while not self._stop.is_set():
            if self.db.exists():
                try:
                    store = Store.open_read_only(self.db)
                    try:
                        found = current(store.get(JOURNAL_KEY), None)
                    finally:
                        store.close()
                except Exception:  # noqa: BLE001 - the daemon may be writing; the next poll reads it
                    found = None
                if found is not None:
                    self.take(found[0])
            self.polls += 1
            self._stop.wait(POLL_S)

    def take(self, upgrade: dict[str, Any]) -> None:
        """Note each node's state and since (the first seen since of a state is when it was entered)."""
        for node, entry in (upgrade.get("nodes") or {}).items():
            if isinstance(entry, dict) and entry.get("state") and entry.get("since") is not None:
                self.entered.setdefault(node, {}).setdefault(str(entry["state"]), float(entry["since"]))


STEP = re.compile(r"^upgrade: (\S+): ([a-z-]+)")


def from_log(path: Path, after: float) -> dict[str, dict[str, float]]:
    """Per node, when it entered each state after AFTER, from the daemon's JSON log (`rollout.step` lines
    "upgrade: NODE: STATE", logged right after the state is journalled; every transition, however short)."""
    entered: dict[str, dict[str, float]] = {}
    for line in path.read_text(errors="replace").splitlines():
        if '"rollout.step"' not in line:
            continue
        event = json.loads(line)
        found = STEP.match(str(event.get("step", "")))
        when = datetime.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        if found and found.group(2) in STATES and when >= after:  # "resumed" is a log line, not a state
            entered.setdefault(found.group(1), {}).setdefault(found.group(2), when)
    return entered


def figures(entered: dict[str, dict[str, float]], max_unavailable: int) -> dict[str, Any]:
    """Per node: reboot wait and node time; per wave (groups of MAX_UNAVAILABLE by start): span; missing states."""
    reboot = {n: s["validating"] - s["rebooting"] for n, s in entered.items() if {"rebooting", "validating"} <= set(s)}
    starts = {n: min(s.get(k, float("inf")) for k in STATES[1:]) for n, s in entered.items()}
    node_s = {n: s["done"] - starts[n] for n, s in entered.items() if "done" in s and starts[n] != float("inf")}
    order = sorted(node_s, key=lambda n: starts[n])
    waves = [order[i:i + max_unavailable] for i in range(0, len(order), max_unavailable)]
    wave_s = [round(max(entered[n]["done"] for n in w) - min(starts[n] for n in w), 2) for w in waves]
    return {"reboot_wait_s": {n: round(v, 2) for n, v in sorted(reboot.items())},
            "reboot_wait_median_s": round(median(list(reboot.values())), 2) if reboot else None,
            "reboot_wait_max_s": round(max(reboot.values()), 2) if reboot else None,
            "node_s": {n: round(v, 2) for n, v in sorted(node_s.items())},
            "node_median_s": round(median(list(node_s.values())), 2) if node_s else None,
            "waves": [",".join(w) for w in waves], "wave_s": wave_s,
            "states_seen": sorted({s for states in entered.values() for s in states}, key=state_order)}


def ended(daemon: Daemon, commit: str) -> bool:
    """Whether the daemon applied COMMIT or rolled it back (a failed upgrade past its budget)."""
    status = daemon.status()
    return status.get("applied_commit") == commit or commit in (status.get("rolled_back") or {})


def status_sample(daemon: Daemon, watch: JournalWatch, timeout: float = 600.0) -> list[str]:
    """`reconciler status`'s upgrade lines once a node is seen rebooting (what an admin sees mid-upgrade)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any("rebooting" in s for s in list(watch.entered.values())):
        if daemon.proc is not None and daemon.proc.poll() is not None:
            raise RuntimeError(f"daemon exited ({daemon.proc.returncode}):\n{daemon.log_tail()}")
        time.sleep(POLL_S)
    out = subprocess.run(reconciler_argv("status", "--state-dir", str(daemon.state_dir)), cwd=REPO,
                         env=python_env(), capture_output=True, text=True, timeout=120, check=False)
    lines = out.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("upgrade:")), len(lines))
    if start == len(lines):
        return [f"no upgrade line in `reconciler status` (exit {out.returncode}): {out.stderr.strip()[-300:]}"]
    return [lines[start], *itertools.takewhile(lambda line: line.startswith("  "), lines[start + 1:])]


def measure(computes: int, index: int, max_unavailable: int = MAX_UNAVAILABLE) -> dict[str, Any]:
    """One testbed: the daemon installs 550, then takes the 570 upgrade; timed from its journal; always torn down."""
    started = time.monotonic()
    with UpgradeTestbed(computes, index) as bed:
        old, new = bed.versions()[0], bed.versions()[-1]
        (bed.desired / "packages.yaml").write_text(packages_yaml(old, bed.computes_hostlist, needs=False))
        remote = Remote.create(bed.work, bed.desired)
        daemon = Daemon(bed, remote).start()
        try:
            first = git_out(remote.work, "rev-parse", "HEAD")
            daemon.wait_applied(first, timeout=1800)
            bed.wait_idle()
            if set(bed.installed().values()) != {old}:
                raise RuntimeError(f"{old} not installed everywhere: {bed.installed()}")
            log(f"upgrade N={computes}: {DRIVER} {old} installed by the daemon; pushing {new} (needs: reboot)")
            with JournalWatch(daemon.state_dir / "state.db") as watch:
                commit, pushed = remote.commit(f"{DRIVER} {old} -> {new}", {
                    "packages.yaml": lambda _: packages_yaml(new, bed.computes_hostlist, needs=True),
                    "rollout.yaml": lambda _: rollout_yaml(max_unavailable)})
                sample = status_sample(daemon, watch)
                daemon.wait(f"{commit[:12]} applied or rolled back", lambda: ended(daemon, commit), UPGRADE_TIMEOUT_S)
            run = daemon.run_of(commit)
            entered = from_log(daemon.log_path, pushed)
            installed, reported, drained = bed.installed(), bed.reported(), bed.drained()
        finally:
            daemon.stop()
    wrong = sorted(n for n in installed if installed[n] != new or not reported[n].startswith(new.split("-")[0]))
    row = {"computes": computes, "max_unavailable": max_unavailable, "from": old, "to": new,
           "outcome": run["outcome"], "total_s": round(run["ended"] - pushed, 2),
           "push_to_run_s": round(run["started"] - pushed, 2), "journal_polls": watch.polls,
           "status_while_rebooting": sample,
           **figures(entered, max_unavailable), "journal_states_seen": sum(len(v) for v in watch.entered.values()),
           "log_states": sum(len(v) for v in entered.values()), "nodes_not_new": wrong, "drained_after": drained,
           "testbed_s": round(time.monotonic() - started, 1)}
    log(f"upgrade N={computes}: {old} -> {new} {row['outcome']} in {row['total_s']:.1f} s; waves {row['wave_s']} s; "
        f"reboot wait median {row['reboot_wait_median_s']} s, max {row['reboot_wait_max_s']} s"
        + (f"; NOT on {new}: {wrong}" if wrong else "; every node reports the new driver"))
    return row


def run(nodes: list[int], skipped: dict[str, str]) -> list[dict[str, Any]]:
    """Measure at each N; a failing N is recorded in SKIPPED with the reason."""
    rows = []
    for offset, computes in enumerate(nodes):
        try:
            rows.append(measure(computes, INDEX + offset))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            log(f"upgrade N={computes} failed: {exc}")
            skipped[f"upgrade N={computes}"] = str(exc).splitlines()[0][:300]
    return rows


def table(rows: list[dict[str, Any]]) -> Table:
    """The upgrade table: per N, total, per-wave spans, reboot wait median and max, nodes left wrong."""
    out = []
    for r in rows:
        out.append([str(r["computes"]), str(r["max_unavailable"]), f"{r['from']} → {r['to']}", r["outcome"],
                    f"{r['total_s']:.1f} s", ", ".join(f"{s:.1f}" for s in r["wave_s"]),
                    f"{r['node_median_s']} s", f"{r['reboot_wait_median_s']} s / {r['reboot_wait_max_s']} s",
                    "none" if not r["nodes_not_new"] and not r["drained_after"] else
                    f"{len(r['nodes_not_new'])} not new, {len(r['drained_after'])} drained"])
    return Table("upgrade", "Rolling driver upgrade with reboots (stand-in driver pair, real Slurm reboot)",
                 ["computes", "max out", "driver", "outcome", "push -> applied", "per wave (s)", "per node (median)",
                  "reboot wait median / max", "left wrong"], out,
                 ["Per-node times from the daemon's log of the upgrade's states (each logged as it is journalled); "
                  "reboot wait = rebooting -> validating (reboot asked -> new boot id and slurmd "
                  "registered); a wave = the i-th group of `max out` nodes by start (they may overlap); the GPU gate "
                  "checks the stand-in nvidia-smi's driver against the package's version."])


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Every node on the new driver, none left drained, the upgrade applied."""
    return [(f"upgrade N={r['computes']}: {r['outcome']}, every node on {r['to']} and resumed: "
             f"{'yes' if not r['nodes_not_new'] and not r['drained_after'] else 'NO'}",
             r["outcome"] == "applied" and not r["nodes_not_new"] and not r["drained_after"]) for r in rows]
