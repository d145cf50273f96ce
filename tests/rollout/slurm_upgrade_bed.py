"""What the Slurm major-upgrade tests on the testbed share: the desired state's pins and rollout, the daemons' and
nodes' versions, the times each daemon started at a release (its own log) and each package was installed (dpkg's
log), and a watcher of node states during the upgrade."""

from __future__ import annotations

import re
import threading
from datetime import datetime

from tests.testbed_fixture import Testbed

NODES = ["gpu01", "gpu02", "gpu03"]
CTL_PACKAGES = ["slurmdbd", "slurm-wlm-mysql-plugin", "slurmctld", "slurm-client", "slurm-wlm-basic-plugins"]
COMPUTE_PACKAGES = ["slurmd", "slurm-client", "slurm-wlm-basic-plugins"]
BACKUP = ("mkdir -p /var/backups && mysqldump --single-transaction --databases slurm_acct_db "
          "> /var/backups/slurm_acct_db.sql")
ROLLOUT = f"""rollout:
  waves: progressive
  canary: 1
  steps: ["100%"]
  soak: 0s
  gates: {{smoke_job: false, timeout: 2m}}
  slurm_upgrade:
    backup: "{BACKUP}"
"""
CTLD_LOG, SLURMD_LOG, DPKG_LOG = "/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmd.log", "/var/log/dpkg.log"


def pins(ctl: str, computes: str, nodes: str = "gpu[01-03]") -> str:
    """packages.yaml: ctl's Slurm packages at CTL, the compute nodes' at COMPUTES."""
    def entry(where: str, names: list[str], version: str) -> str:
        return f'  - nodes: "{where}"\n    packages:\n' + "".join(f'      {n}: "{version}"\n' for n in names)
    return "packages:\n" + entry("ctl", CTL_PACKAGES, ctl) + entry(nodes, COMPUTE_PACKAGES, computes)


def installed(bed: Testbed, node: str, names: list[str]) -> dict[str, str]:
    """Package -> installed version on NODE (dpkg)."""
    out = bed.run(node, "dpkg-query -W -f='${Package} ${Version}\\n' " + " ".join(names), check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def upstream(version: str) -> str:
    """`26.05.5-1` -> `26.05.5`."""
    return version.rsplit("-", 1)[0]


def started_at(bed: Testbed, node: str, log: str, daemon: str, version: str) -> list[datetime]:
    """When DAEMON logged that it started at VERSION on NODE (`[2026-11-28T13:09:08.498] slurmctld version 26.05.5
    started`), oldest first."""
    text = bed.run(node, f"cat {log}", check=True).stdout
    return [datetime.fromisoformat(t) for t in
            re.findall(rf"^\[([0-9T:.-]+)\] {daemon} version {re.escape(version)} started", text, re.M)]


def installed_at(bed: Testbed, node: str, package: str, version: str) -> list[datetime]:
    """When dpkg logged PACKAGE=VERSION installed on NODE (`2026-11-28 13:09:11 status installed slurmd:amd64
    26.05.5-1`)."""
    text = bed.run(node, f"cat {DPKG_LOG}", check=True).stdout
    return [datetime.fromisoformat(t) for t in
            re.findall(rf"^(\S+ \S+) status installed {re.escape(package)}:\S+ {re.escape(version)}$", text, re.M)]


def running_versions(bed: Testbed, via: str = "ctl") -> dict[str, str]:
    """What each daemon answers with: slurmctld (SLURM_VERSION), slurmdbd (SLURMDBD_VERSION), each slurmd
    (Version= it registered with), asked with VIA's commands (a client newer than slurmctld gets no answer: ask
    through a node not upgraded yet); a daemon that does not answer is left out."""
    out: dict[str, str] = {}
    config = bed.run(via, "timeout 10 scontrol show config", timeout=30).stdout
    dbd = bed.run(via, "timeout 10 sacctmgr -n show configuration", timeout=30).stdout
    for name, text, key in (("slurmctld", config, "SLURM_VERSION"), ("slurmdbd", dbd, "SLURMDBD_VERSION")):
        if found := re.search(rf"^{key}\s*=\s*(\S+)", text, re.M):
            out[name] = found.group(1)
    for line in bed.run(via, "timeout 10 scontrol show node -o", timeout=30).stdout.splitlines():
        if (node := re.search(r"NodeName=(\S+)", line)) and (version := re.search(r" Version=(\S+)", line)):
            out[node.group(1)] = version.group(1)
    return out


def job_state(bed: Testbed, job: str) -> list[str]:
    """sacct's JobID, State, ExitCode and Start of JOB (its allocation), or [] before sacct knows it."""
    line = bed.run("ctl", f"sacct -X -n -P -j {job} -o JobID,State,ExitCode,Start", timeout=30).stdout.strip()
    return line.split("|") if line else []


class StateWatch(threading.Thread):
    """Polls `sinfo -N` on ctl (every 0.3 s, through nsenter) until stopped: every state each node showed."""

    def __init__(self, bed: Testbed) -> None:
        super().__init__(daemon=True)
        self.bed = bed
        self.seen: dict[str, set[str]] = {}
        self.polls = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.3):
            answer = self.bed.run("ctl", "sinfo -h -N -o '%N %T'", timeout=30)
            if answer.returncode != 0:  # slurmctld restarting: no view this time
                continue
            self.polls += 1
            for line in answer.stdout.splitlines():
                node, _, state = line.partition(" ")
                self.seen.setdefault(node, set()).add(state.strip())

    def stop(self) -> dict[str, set[str]]:
        """Stop polling; every node's states seen."""
        self.done.set()
        self.join(timeout=60)
        return self.seen


