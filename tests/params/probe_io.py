"""Talking to a testbed for the consequence probe: files, daemons, their logs and pids, node health, the job."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tests.testbed_fixture import Testbed

ETC = "/etc/slurm"
FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "plugstack.conf", "topology.conf", "prolog.sh")
LOG = {"slurmctld": "/var/log/slurm/slurmctld.log", "slurmd": "/var/log/slurm/slurmd.log"}
Files = dict[str, str | None]  # file name under /etc/slurm -> text, None = absent

__all__ = ["ETC", "FILES", "Files", "Testbed"]


def sh(bed: Testbed, node: str, cmd: str, timeout: float = 60) -> tuple[int, str]:
    """Run CMD on NODE; (exit status, stdout+stderr)."""
    proc = bed.run(node, cmd, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def poll(check: Callable[[], str | None], timeout: float, step: float = 0.2,
         final: Callable[[str], bool] = lambda answer: False) -> str | None:
    """Call CHECK until it returns None, an answer FINAL says no wait can change, or TIMEOUT passes; its last
    answer."""
    end = time.monotonic() + timeout
    while True:
        answer = check()
        if answer is None or final(answer) or time.monotonic() > end:
            return answer
        time.sleep(step)


def read_files(bed: Testbed, node: str = "ctl") -> Files:
    """The Slurm files of a node."""
    files: Files = {}
    for name in FILES:
        rc, out = sh(bed, node, f"base64 -w0 {ETC}/{name}")
        files[name] = base64.b64decode(out).decode() if rc == 0 else None
    return files


def write_files(bed: Testbed, files: Files) -> None:
    """Write FILES on every node (remove those that are None)."""
    cmds = []
    for name, text in files.items():
        path = f"{ETC}/{name}"
        if text is None:
            cmds.append(f"rm -f {path}")
        else:
            cmds.append(f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {path}.new "
                        f"&& chmod {755 if name.endswith('.sh') else 644} {path}.new && mv {path}.new {path}")
    for node in bed.nodes:
        rc, out = sh(bed, node, " && ".join(cmds))
        assert rc == 0, f"{node}: writing Slurm files: {out}"


def ctld_up(bed: Testbed) -> str | None:
    """None when slurmctld answers."""
    rc, out = sh(bed, "ctl", "scontrol ping", timeout=30)
    return None if rc == 0 and "is UP" in out else f"slurmctld does not answer: {out.strip()}"


def node_states(bed: Testbed) -> dict[str, str]:
    """sinfo's node -> state (with its flags: '*' not responding, 'drain', 'inval', ...)."""
    rc, out = sh(bed, "ctl", "sinfo -h -N -o '%N %t'")
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2) if rc == 0 else {}


def healthy(bed: Testbed, computes: list[str]) -> str | None:
    """None when slurmctld answers, every slurmd of COMPUTES runs and sinfo shows each usable."""
    if why := ctld_up(bed):
        return why
    for node, pid in pids(bed, computes).items():
        if pid is None:
            return f"slurmd on {node} is not running"
    states = node_states(bed)
    bad = {n: states.get(n, "missing") for n in computes if states.get(n) not in ("idle", "mix", "alloc")}
    return f"nodes not usable: {bad}" if bad else None


def refused(bed: Testbed, computes: list[str]) -> str | None:
    """Nodes slurmctld marked INVAL: their slurmd registered with another configuration than slurmctld's, and stays
    refused until it starts again, so waiting longer changes nothing."""
    bad = {n: s for n, s in node_states(bed).items() if n in computes and "inval" in s}
    return f"refused by slurmctld (configuration differs): {bad}" if bad else None


def pids(bed: Testbed, computes: list[str]) -> dict[str, int | None]:
    """The running slurmctld's (as 'ctl') and each compute node's slurmd's pid (None: not running)."""
    out: dict[str, int | None] = {}
    for node in ["ctl", *computes]:
        rc, text = sh(bed, node, f"pgrep -o -x {'slurmctld' if node == 'ctl' else 'slurmd'}")  # not slurmstepd
        out[node] = int(text.strip()) if rc == 0 and text.strip().isdigit() else None
    return out


def log_sizes(bed: Testbed, computes: list[str]) -> dict[str, int]:
    """Each daemon's log size now: where to look for what the next step makes it say."""
    out = {}
    for node in ["ctl", *computes]:
        rc, text = sh(bed, node, f"stat -c %s {LOG['slurmctld' if node == 'ctl' else 'slurmd']} 2>/dev/null || echo 0")
        out[node] = int(text.strip() or 0)
    return out


def log_since(bed: Testbed, node: str, offset: int) -> str:
    """What NODE's daemon logged after OFFSET."""
    return sh(bed, node, f"tail -c +{offset + 1} {LOG['slurmctld' if node == 'ctl' else 'slurmd']}")[1]


def service(bed: Testbed, nodes: list[str] | tuple[str, ...], action: str, name: str) -> None:
    """supervisorctl ACTION NAME on NODES, all at once (supervisorctl takes a good part of a second)."""
    with ThreadPoolExecutor(max(1, len(nodes))) as pool:
        list(pool.map(lambda node: sh(bed, node, f"supervisorctl {action} {name}"), nodes))


# Once slurmctld has taken a `scontrol reconfigure` in, its log says so: 22.05 answers the request when done
# ("_slurm_rpc_reconfigure_controller: completed" or its error), 23.11+ re-executes itself in place and says
# "Running as primary controller" once the new image has read the files; a "fatal" means it died.
CTLD_RECONFIGURED = re.compile(r"_slurm_rpc_reconfigure_controller|Running as primary controller|fatal")
# 24.11's slurmd re-executes itself on reconfigure too and logs "slurmd started on"; 22.05's logs nothing.
SLURMD_RECONFIGURED = re.compile(r"slurmd started on|fatal")


def reconfigure(bed: Testbed, computes: list[str]) -> str | None:
    """`scontrol reconfigure`, waiting until slurmctld (and, where they say so, the slurmds) have read the files;
    None, or what went wrong."""
    sizes = log_sizes(bed, computes)
    rc, out = sh(bed, "ctl", "scontrol reconfigure")
    if rc != 0:
        return f"scontrol reconfigure failed ({rc}): {out.strip()[:200]}"
    said = poll(lambda: None if CTLD_RECONFIGURED.search(log_since(bed, "ctl", sizes["ctl"])) else "no word", 30)
    if said:
        return "slurmctld's log says nothing of the reconfigure in 30 s"
    if bed.slurm != "22.05":
        poll(lambda: next((n for n in computes if not SLURMD_RECONFIGURED.search(log_since(bed, n, sizes[n]))),
                          None), 10)
    return poll(lambda: ctld_up(bed), 30)


def start_job(bed: Testbed) -> str:
    """A long sleep job on gpu01, running."""
    rc, out = sh(bed, "ctl", "sbatch --parsable -w gpu01 -N1 -n1 -o /dev/null --wrap 'sleep 100000'")
    assert rc == 0, out
    job = out.strip().split(";")[0]
    state = poll(lambda: None if job_state(bed, job) == "RUNNING" else job_state(bed, job) or "gone", 30)
    assert state is None, f"job {job} did not start: {state}"
    return job


def job_state(bed: Testbed, job: str) -> str:
    """squeue's state of a job ('' once it is gone)."""
    return sh(bed, "ctl", f"squeue -h -j {job} -o %T")[1].strip()


def job_alive(bed: Testbed, job: str) -> bool:
    """The job is RUNNING for slurmctld and its sleep still runs on gpu01."""
    return job_state(bed, job) == "RUNNING" and sh(bed, "gpu01", "pgrep -x sleep")[0] == 0
