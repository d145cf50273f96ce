"""A real Slurm major upgrade of a 16-node cluster, 24.11 -> 26.05 with Debian's packages, per phase (issue 44).

Each run brings up a fresh testbed (`testbed up --slurm 24.11 --accounting --packages`: real Slurm 24.11.5 on a
Debian 13 root, slurmdbd on MariaDB, the testbed's signed repository offering Debian's 26.05.5-1), applies its
desired state with every Slurm package pinned where it is, starts a 4-node job that runs through the upgrade and a
stream of one-node jobs submitted every 0.5 s from the last node to be upgraded (its 24.11 commands talk to either
slurmctld), then upgrades it one of two ways:

- **reconciler**: `reconciler apply` of the commit pinning every Slurm package to 26.05.5-1 (backup, slurmdbd,
  slurmctld in a lead wave, then slurmd in a canary and one more wave, node checks as gates);
- **by hand** (the peer): the steps of Slurm's upgrade guide as a careful admin runs them from the login node, one
  ssh command at a time, one compute node after another (stop slurmdbd, dump the database, install, start it and
  wait for it; stop slurmctld, archive StateSaveLocation, install, start, wait; per node: install, restart slurmd,
  wait for it to register at 26.05).

Phases are read from the clock of the host (the CLI's lines as they come) and the nodes' own logs (slurmdbd's and
slurmctld's "version 26.05.5 started", dpkg's "status installed"): backup, slurmdbd (transaction and conversion),
slurmctld, each slurmd wave. Jobs held: for each streamed job, its start minus its submission (sacct, from the
upgraded slurmdbd), and how long sbatch was refused; the 4-node job must end COMPLETED 0:0.

    sudo python3 -m bench.slurm_upgrade [--nodes 16] [--runs 1] [--out bench/results/slurm-upgrade-<commit>]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import TESTBED, log, machine, median, python_env, reconciler_argv, testbed
from tests.rollout.slurm_upgrade_bed import BACKUP, COMPUTE_PACKAGES, CTL_PACKAGES, ROLLOUT, pins

NAME, SUBNET = "bsu", "10.249.0"
STREAM = "/root/stream.log"


def on(node: str, command: str, check: bool = True, timeout: float = 600) -> str:
    """COMMAND inside NODE (nsenter, no ssh)."""
    return testbed("exec", "--name", NAME, node, command, check=check, timeout=timeout)



def up(nodes: int) -> tuple[Path, dict[str, str]]:
    """A fresh 24.11 testbed; its desired state copied and applied with the Slurm packages pinned where they are;
    (the desired-state copy, the manifest's Slurm releases)."""
    testbed("down", "--name", NAME, check=False)
    state = Path(testbed("up", "--slurm", "24.11", "--accounting", "--packages", "--nodes", str(nodes), "--name",
                         NAME, "--subnet", SUBNET).strip().splitlines()[-1])
    releases = json.loads((state.parent / "packages" / "manifest.json").read_text())["slurm"]["releases"]
    desired = Path(tempfile.mkdtemp(prefix="bench-slurm-upgrade-")) / "desired"
    shutil.copytree(state, desired)
    (desired / "rollout.yaml").write_text("rollout:\n  waves: all\n")
    (desired / "packages.yaml").write_text(pins(releases["24.11"], releases["24.11"], f"gpu[01-{nodes:02d}]"))
    first = subprocess.run(reconciler_argv("apply", "--yes", str(desired)), capture_output=True, text=True,
                           env=python_env(), timeout=900)
    if first.returncode != 0:
        raise RuntimeError(f"base apply: {first.stdout[-1500:]}{first.stderr[-500:]}")
    return desired, releases


def start_jobs(nodes: int) -> tuple[str, subprocess.Popen[bytes]]:
    """The 4-node job running through the upgrade, and the stream of one-node jobs from the last node."""
    wide = on("ctl", "sbatch --parsable -N4 -w gpu[01-04] -o /dev/null --wrap 'srun sleep 150'").strip()
    last = f"gpu{nodes:02d}"
    loop = (f": > {STREAM}; while :; do t=$(date +%s.%N); j=$(sbatch --parsable -p debug -x {last} -o /dev/null "
            f"--wrap true 2>&1 | tr -d '\\n'); echo \"$t $j\" >> {STREAM}; sleep 0.5; done")
    stream = subprocess.Popen([str(TESTBED), "exec", "--name", NAME, last, loop], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while "RUNNING" not in on("ctl", f"squeue -h -j {wide} -o %T", check=False) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(5)  # a few streamed jobs before the upgrade: the normal start delay
    return wide, stream


def reconciler_upgrade(desired: Path, new: str, nodes: int) -> dict[str, Any]:
    """Apply the upgrade commit; every output line with the host's time it arrived."""
    (desired / "rollout.yaml").write_text(ROLLOUT)
    (desired / "packages.yaml").write_text(pins(new, new, f"gpu[01-{nodes:02d}]"))
    started = datetime.now()
    proc = subprocess.Popen(reconciler_argv("apply", "--yes", str(desired)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=python_env())
    lines: list[tuple[datetime, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((datetime.now(), line.rstrip("\n")))
    rc = proc.wait()
    ended = datetime.now()
    if rc != 0:
        raise RuntimeError("upgrade apply failed:\n" + "\n".join(t for _, t in lines[-40:]))
    def at(pattern: str) -> datetime:
        return next(t for t, text in lines if re.search(pattern, text))
    waves = [(m.group(1), m.group(2), float(m.group(3))) for _, text in lines
             if (m := re.search(r"wave (\d+) \(([a-z0-9 ]+)\) \S+: apply ([0-9.]+)s", text))]
    return {"started": started, "ended": ended, "backup_done": at(r"^  ctl: stop slurmdbd and back up"),
            "lead_started": at(r"wave 1/\d+ \(lead\): applying"), "waves": waves}


def by_hand(new: str, nodes: int) -> dict[str, Any]:
    """The upgrade guide's steps, one ssh command at a time from ctl, one compute node after another."""
    install = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
    started = datetime.now()
    on("ctl", "supervisorctl stop slurmdbd && " + BACKUP)
    backup_done = datetime.now()
    on("ctl", install + " ".join(f"{p}={new}" for p in CTL_PACKAGES) + " >/dev/null && supervisorctl start slurmdbd"
       " && until sacctmgr -n show cluster >/dev/null 2>&1; do sleep 1; done")
    on("ctl", "supervisorctl stop slurmctld && mkdir -p /var/backups/slurmctld-state && tar -C /var/lib/slurm/slurmctld"
       " -czf /var/backups/slurmctld-state/statesave.tar.gz . && supervisorctl start slurmctld && until scontrol ping"
       " | grep -q UP; do sleep 1; done")
    upstream = new.rsplit("-", 1)[0]
    for i in range(1, nodes + 1):
        node = f"gpu{i:02d}"
        testbed("ssh", "--name", NAME, node, install + " ".join(f"{p}={new}" for p in COMPUTE_PACKAGES)
                + " >/dev/null && supervisorctl restart slurmd && until scontrol show node -o " + node
                + f" | grep -q 'Version={upstream} '; do sleep 1; done")
    return {"started": started, "ended": datetime.now(), "backup_done": backup_done, "waves": []}


def node_time(node: str, log_path: str, pattern: str) -> datetime | None:
    """The first time NODE's LOG_PATH has a line matching PATTERN (slurm's `[ISO]` or dpkg's `date time`)."""
    text = on(node, f"cat {log_path}", check=False)
    for line in text.splitlines():
        if re.search(pattern, line):
            stamp = re.match(r"^\[([0-9T:.-]+)\]|^(\S+ \S+) ", line)
            if stamp:
                return datetime.fromisoformat(stamp.group(1) or stamp.group(2))
    return None


def held(stream: subprocess.Popen[bytes], nodes: int, since: datetime, until: datetime) -> dict[str, Any]:
    """From the streamed submissions: how long each job waited to start (sacct) before, during and after the
    upgrade window [SINCE, UNTIL], and how long sbatch was refused."""
    stream.terminate()
    stream.wait(timeout=30)
    on(f"gpu{nodes:02d}", "pkill -f 'sbatch --parsable -p debug' ; pkill -f 'while :; do t=' ; true", check=False)
    text = on(f"gpu{nodes:02d}", f"cat {STREAM}", check=False)
    submitted: dict[str, float] = {}
    refused: list[float] = []
    for line in text.splitlines():
        stamp, _, answer = line.partition(" ")
        if answer.isdigit():
            submitted[answer] = float(stamp)
        else:
            refused.append(float(stamp))
    time.sleep(3)
    started: dict[str, float] = {}
    ids = ",".join(submitted)
    for row in on("ctl", f"sacct -n -P -X -j {ids} -o JobID,Start", check=False).splitlines() if ids else []:
        job, _, start = row.partition("|")
        if start and start not in ("Unknown", "None"):
            started[job] = datetime.fromisoformat(start).timestamp()
    waits = {j: started[j] - submitted[j] for j in submitted if j in started}
    window = [w for j, w in waits.items() if since.timestamp() <= submitted[j] <= until.timestamp()]
    outside = [w for j, w in waits.items() if not since.timestamp() <= submitted[j] <= until.timestamp()]
    return {"submitted": len(submitted), "started": len(started), "refused": len(refused),
            "refused_span_s": (max(refused) - min(refused) + 0.5) if refused else 0.0,
            "wait_max_during_s": max(window, default=0.0), "wait_median_outside_s": median(outside) if outside else 0.0}


def one_run(way: str, nodes: int) -> dict[str, Any]:
    """One fresh testbed upgraded WAY (`reconciler` or `by-hand`); its phases and the jobs' waits."""
    desired, releases = up(nodes)
    new = releases["26.05"]
    wide, stream = start_jobs(nodes)
    try:
        done = reconciler_upgrade(desired, new, nodes) if way == "reconciler" else by_hand(new, nodes)
    except BaseException:
        stream.terminate()
        raise
    jobs = held(stream, nodes, done["started"], done["ended"])
    version = new.rsplit("-", 1)[0]
    dbd = node_time("ctl", "/var/log/slurm/slurmdbd.log", rf"slurmdbd version {version} started")
    ctld = node_time("ctl", "/var/log/slurm/slurmctld.log", rf"slurmctld version {version} started")
    stopped = node_time("ctl", "/var/log/supervisor/supervisord.log", r"stopped: slurmctld")
    start, end = done["started"], done["ended"]
    poll_end = time.monotonic() + 200
    while time.monotonic() < poll_end and on("ctl", f"sacct -n -P -X -j {wide} -o State", check=False).strip() in (
            "RUNNING", ""):
        time.sleep(2)
    wide_state = on("ctl", f"sacct -n -P -X -j {wide} -o State,ExitCode", check=False).strip()
    row = {"way": way, "nodes": nodes, "total_s": (end - start).total_seconds(),
           "backup_s": (done["backup_done"] - start).total_seconds(),
           "slurmdbd_s": (dbd - done["backup_done"]).total_seconds() if dbd else None,
           "slurmctld_s": (ctld - dbd).total_seconds() if ctld and dbd else None,
           "slurmctld_down_s": (ctld - stopped).total_seconds() if ctld and stopped else None,
           "slurmd_waves_s": [w[2] for w in done["waves"][1:]],
           "slurmd_all_s": (end - ctld).total_seconds() if ctld else None,
           "wide_job": wide_state, "jobs": jobs,
           "versions": sorted(set(on("ctl", "sinfo -h -N -o %v", check=False).split()))}
    testbed("down", "--name", NAME, check=False)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one row per run."""
    def s(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)
    out = ["| way | nodes | total s | backup s | slurmdbd s | slurmctld s | slurmctld down s | slurmd waves s | "
           "slurmd all s | job wait max during s | median outside s | sbatch refused | 4-node job | versions |",
           "|" + "---|" * 14]
    for r in rows:
        j = r["jobs"]
        out.append(f"| {r['way']} | {r['nodes']} | {s(r['total_s'])} | {s(r['backup_s'])} | {s(r['slurmdbd_s'])} | "
                   f"{s(r['slurmctld_s'])} | {s(r['slurmctld_down_s'])} | "
                   f"{', '.join(f'{w:.1f}' for w in r['slurmd_waves_s']) or '-'} | {s(r['slurmd_all_s'])} | "
                   f"{s(j['wait_max_during_s'])} | {s(j['wait_median_outside_s'])} | {j['refused']} | "
                   f"{r['wide_job']} | {', '.join(r['versions'])} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, write results.json and table.md into --out."""
    p = argparse.ArgumentParser(prog="bench.slurm_upgrade", description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    rows = []
    for run in range(args.runs):
        for way in ("reconciler", "by-hand") if run % 2 == 0 else ("by-hand", "reconciler"):
            log(f"slurm upgrade: run {run + 1}, {way}, {args.nodes} nodes")
            rows.append(one_run(way, args.nodes))
            log(json.dumps(rows[-1], default=str))
    text = table(rows)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2,
                                                          default=str) + "\n")
        (args.out / "table.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
