"""The fault suite's testbed: 3 computes + ctl with real Slurm, a managed payload file whose version each
injection bumps, the same desired state as a local directory (CLI applies) and in a Git remote (the daemon).

Invariants read here: every node's payload is exactly the old or the new version (never neither), and the
sentinel jobs started before a fault still run after it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.daemon.harness import GitRemote
from tests.testbed_fixture import Testbed

REPO = Path(__file__).resolve().parents[2]
COMPUTES = ["gpu01", "gpu02", "gpu03"]
PAYLOAD_DIR = "/etc/reconciler-fault"
PAYLOAD = f"{PAYLOAD_DIR}/payload.conf"
PAYLOAD_LINES = 2000  # ~100 KB: a write takes long enough to be interrupted


def payload_text(version: int) -> str:
    """The payload file's text at VERSION (every line names it: a torn file shows two versions or too few)."""
    return "".join(f"version {version} line {i:05d} of the fault-suite payload\n" for i in range(PAYLOAD_LINES))


def payload_yaml(version: int) -> str:
    """faults.yaml: the payload as a managed file on every compute node."""
    body = "".join(f"      {line}\n" for line in payload_text(version).splitlines())
    return (f"files:\n  - path: {PAYLOAD}\n    nodes: gpu[01-03]\n    mode: '0644'\n    content: |\n{body}")


@dataclass
class FaultBed:
    """A running testbed, its desired state (directory and Git remote), and the payload version in them."""

    testbed: Testbed
    desired: Path
    remote: GitRemote
    root: Path
    version: int = 0
    jobs: dict[str, str] = field(default_factory=dict)  # node -> sentinel job id

    def exec(self, node: str, command: str, check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A shell command inside a node (nsenter)."""
        return self.testbed.run(node, command, check=check, timeout=timeout)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The reconciler CLI."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)

    def apply_process(self) -> subprocess.Popen[str]:
        """`reconciler apply --yes` on the local desired state, started in the background."""
        return subprocess.Popen([sys.executable, "-m", "reconciler.cli", "apply", str(self.desired), "--yes"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def bump(self, edit_cluster: bool = False) -> int:
        """Write the next payload version into the local desired state (and, EDIT_CLUSTER, a new MaxTime)."""
        self.version += 1
        (self.desired / "faults.yaml").write_text(payload_yaml(self.version))
        if edit_cluster:
            path = self.desired / "cluster.yaml"
            text = path.read_text()
            path.write_text(re.sub(r'MaxTime: "04:\d\d:00"', f'MaxTime: "04:{self.version % 60:02d}:00"', text))
        return self.version

    def versions(self, nodes: list[str] | None = None) -> dict[str, int | str]:
        """Each node's payload: its version, 'absent', or 'TORN' (neither a whole old nor a whole new file)."""
        out: dict[str, int | str] = {}
        for node in nodes or COMPUTES:
            done = self.exec(node, f"cat {PAYLOAD} 2>/dev/null || echo ABSENT")
            text = done.stdout
            if text == "ABSENT\n":
                out[node] = "absent"
                continue
            found = re.findall(r"^version (\d+) line", text, re.M)
            whole = {int(v) for v in found}
            out[node] = whole.pop() if len(whole) == 1 and text == payload_text(int(found[0])) else "TORN"
        return out

    def torn(self, allowed: set[int]) -> int:
        """Nodes whose payload is neither of the ALLOWED versions (a torn write, or a version out of nowhere)."""
        return sum(1 for v in self.versions().values() if v not in allowed and v != "absent")

    def plan_clean(self) -> bool:
        """A plan of the local desired state finds nothing to change."""
        return self.cli("plan", str(self.desired)).returncode == 0

    def converge(self, timeout: float = 180) -> float | None:
        """Apply until a plan is clean; seconds it took, or None when it did not converge in TIMEOUT."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            self.cli("apply", str(self.desired), "--yes")
            if self.plan_clean():
                return time.monotonic() - started
            time.sleep(1)
        return None

    def start_sentinels(self, nodes: list[str]) -> None:
        """A long job on each of NODES (what a fault must not kill)."""
        for node in nodes:
            if node in self.jobs and self.job_running(node):
                continue
            if node in self.jobs:  # requeued by a reboot, or lost with slurmctld's state: not ours to keep waiting on
                self.exec("ctl", f"scancel --state=PENDING {self.jobs.pop(node)}")  # never a running job
            out = self.exec("ctl", f"sbatch -w {node} -N1 -o /dev/null --wrap 'sleep 3000' --parsable", check=True)
            self.jobs[node] = out.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(self.job_running(n) for n in nodes):
            time.sleep(1)

    def job_running(self, node: str) -> bool:
        """The sentinel job of NODE is RUNNING."""
        job = self.jobs.get(node)
        if job is None:
            return False
        state = self.exec("ctl", f"squeue -h -j {job} -o %T").stdout.strip()
        return state == "RUNNING"

    def killed(self, nodes: list[str]) -> int:
        """Sentinel jobs of NODES that no longer run."""
        return sum(1 for node in nodes if not self.job_running(node))

    def drained(self) -> list[str]:
        """Compute nodes Slurm has drained (any reason)."""
        out = self.exec("ctl", "sinfo -h -N -o '%N %t'").stdout
        return sorted({line.split()[0] for line in out.splitlines() if "drain" in line or line.endswith("drng")})


def wait_until(check: object, timeout: float = 60, step: float = 0.5) -> bool:
    """Poll CHECK (a callable) until true or TIMEOUT."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(step)
    return False
