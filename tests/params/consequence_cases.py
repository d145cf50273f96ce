"""The change classes the consequence probe measures: how each edits the Slurm files, and how to see on the
daemons that it took effect.

Each effect is split in two: `ctld`, what slurmctld shows (final once slurmctld answers after the step, so it is
checked once: a try that fails there is recognised at once), and `slurmd`, what only a job on a node shows
(slurmd reads its part asynchronously, so it is polled with a bound).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tests.params.probe_io import ETC, Files, Testbed, node_states, sh

PLUGIN = "/usr/lib/reconciler-testbed/pyxis-standin.so"
Check = Callable[[Testbed], str | None]  # None when the change shows, else what is missing


def nothing(bed: Testbed) -> str | None:
    """No check of this side."""
    return None


@dataclass
class Case:
    """One change class: how it edits the files, how to see it took effect, and which node it takes away/adds."""

    name: str
    edit: Callable[[Files], Files]
    ctld: Check = nothing
    slurmd: Check = nothing
    before: Callable[[Files], Files] | None = None  # the starting point, when not where the previous case ended
    absent: tuple[str, ...] = ()  # compute nodes whose slurmd must not run before the change (not yet added)
    removed: tuple[str, ...] = ()  # compute nodes the change takes away (their slurmd is stopped first)
    added: tuple[str, ...] = ()  # compute nodes the change adds (their slurmd is started after the steps)
    unobservable: Callable[[Files], str | None] | None = None  # why the testbed cannot see this change, or None
    # Where Slurm's documents ask for more than this testbed can show is needed: release -> the source, or None
    documented: Callable[[str], str | None] | None = None


def sub(text: str | None, pattern: str, repl: str) -> str:
    """re.sub on a file that must contain PATTERN."""
    assert text is not None and re.search(pattern, text, re.M), f"{pattern!r} not in {text!r}"
    return re.sub(pattern, repl, text, count=1, flags=re.M)


def edit(**changes: Callable[[str | None], str | None]) -> Callable[[Files], Files]:
    """An edit applying one function per file (file names with '_' for '.')."""
    def apply(files: Files) -> Files:
        out = dict(files)
        for key, fn in changes.items():
            name = key.replace("_", ".")
            out[name] = fn(out.get(name))
        return out
    return apply


without_gpu02 = edit(slurm_conf=lambda t: sub(sub(t, r"^NodeName=gpu\[01-02\]", "NodeName=gpu01"),
                                              r"Nodes=gpu\[01-02\]", "Nodes=gpu01"),
                     gres_conf=lambda t: sub(t, r"^NodeName=gpu\[01-02\]", "NodeName=gpu01"))
with_gpu02 = edit(slurm_conf=lambda t: sub(sub(t, r"^NodeName=gpu01 ", "NodeName=gpu[01-02] "),
                                           r"Nodes=gpu01 ", "Nodes=gpu[01-02] "),
                  gres_conf=lambda t: sub(t, r"^NodeName=gpu01 ", "NodeName=gpu[01-02] "))
gpu4 = edit(slurm_conf=lambda t: sub(t, r"Gres=gpu:8", "Gres=gpu:4"),
            gres_conf=lambda t: sub(t, r"nvidia\[0-7\]", "nvidia[0-3]"))
gpu8 = edit(slurm_conf=lambda t: sub(t, r"Gres=gpu:4", "Gres=gpu:8"),
            gres_conf=lambda t: sub(t, r"nvidia\[0-3\]", "nvidia[0-7]"))


def show(bed: Testbed, what: str) -> str:
    """`scontrol -o show WHAT` on ctl (one line per record)."""
    return sh(bed, "ctl", f"scontrol -o show {what}")[1]


def fields(records: str, key: str) -> list[str]:
    """NodeName, KEY, State and Reason of each `scontrol -o show node` record, for messages."""
    return re.findall(rf"NodeName=\S+|{key}=\S+|State=\S+|Reason=.*?(?= \w+=|$)", records, re.M)


def expect(text: str, pattern: str, what: str) -> str | None:
    """None when PATTERN is in TEXT, else WHAT and the text."""
    return None if re.search(pattern, text) else f"{what} (got: {text.strip()[:200]})"


def runs(bed: Testbed, args: str, pattern: str = "", what: str = "job") -> str | None:
    """None when `srun ARGS` on ctl succeeds (and prints PATTERN)."""
    rc, out = sh(bed, "ctl", f"timeout 20 srun --immediate=5 -N1 {args}", timeout=40)
    if rc != 0:
        return f"{what}: srun {args} failed ({rc}): {out.strip()[:200]}"
    return expect(out, pattern, what) if pattern else None


def add_node(bed: Testbed) -> str | None:
    """slurmctld has gpu02 in debug."""
    return expect(show(bed, "partition debug"), r"Nodes=gpu\[01-02\]", "debug has no gpu02")


def remove_node(bed: Testbed) -> str | None:
    """gpu02 is gone from slurmctld and its partition."""
    rc, out = sh(bed, "ctl", "scontrol -o show node gpu02")
    if rc == 0:
        return f"slurmctld still has gpu02: {out.strip()[:120]}"
    return expect(show(bed, "partition debug"), r"Nodes=gpu01 ", "debug still lists gpu02") or expect(
        " ".join(node_states(bed)), r"^gpu01$", "sinfo lists more than gpu01")


def node_cpus(bed: Testbed) -> str | None:
    """Both nodes have 32 CPUs for slurmctld."""
    nodes = show(bed, "node")
    return None if len(re.findall(r"CPUTot=32 ", nodes)) == 2 else f"CPUTot not 32: {fields(nodes, 'CPUTot')}"


def node_gres(bed: Testbed) -> str | None:
    """Both nodes have gpu:8 for slurmctld."""
    nodes = show(bed, "node")
    return None if len(re.findall(r"Gres=gpu:8[ ,(]", nodes)) == 2 else f"Gres not gpu:8: {fields(nodes, 'Gres')}"


def partition_maxtime(bed: Testbed) -> str | None:
    """debug's MaxTime is 77 minutes for slurmctld (the daemon that enforces it)."""
    return expect(show(bed, "partition debug"), r"MaxTime=01:17:00 ", "debug MaxTime not 01:17:00")


def slurmd_port_ctld(bed: Testbed) -> str | None:
    """slurmctld says 6828."""
    return expect(sh(bed, "ctl", "scontrol show config")[1], r"SlurmdPort\s*=\s*6828", "slurmctld's SlurmdPort")


def slurmd_port(bed: Testbed) -> str | None:
    """Every slurmd listens on 6828 and a job runs on each node."""
    for node in bed.computes:
        if sh(bed, node, "grep -qi ':1AAC .* 0A ' /proc/net/tcp /proc/net/tcp6")[0] != 0:
            return f"slurmd on {node} does not listen on 6828"
    return runs(bed, "-w gpu02 hostname", "gpu02", "job on gpu02") or runs(bed, "-w gpu01 --overlap hostname",
                                                                            "gpu01", "job on gpu01")


PROLOG = "#!/bin/sh\ntouch /tmp/prolog-ran\nexit 0\n"


def prolog(bed: Testbed) -> str | None:
    """A job on gpu02 runs the prolog there (the prolog ends before the job's step starts)."""
    sh(bed, "gpu02", "rm -f /tmp/prolog-ran")
    err = runs(bed, "-w gpu02 true", what="job on gpu02")
    if err:
        return err
    return None if sh(bed, "gpu02", "test -e /tmp/prolog-ran")[0] == 0 else "the job on gpu02 did not run the Prolog"


def gres_types(bed: Testbed) -> str | None:
    """Both nodes have foo:2 for slurmctld."""
    nodes = show(bed, "node")
    return None if len(re.findall(r"Gres=\S*foo:2", nodes)) == 2 else f"no foo:2 on both: {fields(nodes, 'Gres')}"


def plugstack(bed: Testbed) -> str | None:
    """The SPANK plugin runs in the job's step on gpu02 (the stand-in tries to start the image and says so)."""
    rc, out = sh(bed, "ctl", "timeout 20 srun --immediate=5 -N1 -w gpu02 --container-image=/nonexistent.sqsh true",
                 timeout=40)
    return None if "pyxis" in out else f"no pyxis in the step's output (rc {rc}): {out.strip()[:200]}"


def no_cgroup_plugin(files: Files) -> str | None:
    """Why no daemon of this testbed acts on cgroup.conf (None if one would: then the case needs an observation)."""
    conf = files.get("slurm.conf") or ""
    users = re.findall(r"^\s*(?:TaskPlugin|ProctrackType|JobAcctGatherType)\s*=\s*\S*cgroup\S*", conf, re.M | re.I)
    if users:
        return None
    return ("not observable on the testbed: no cgroup plugin reads it (task/none, proctrack/linuxproc, "
            "jobacct_gather/none; the nodes' /sys/fs/cgroup is read-only)")


def nodes_documented(release: str) -> str | None:
    """Before 24.11 the documents ask for every slurmd restarted when nodes come or go; 2 nodes never forward."""
    if release >= "24.11":
        return None
    return ("slurm.conf.5 and scontrol.1 22.05: every slurmd must know each node to forward messages; a 2-node "
            "testbed never forwards (tests/params/test_forwarding_testbed.py does)")


def spank_documented(release: str) -> str:
    """spank.8: plugins loaded in slurmd's context persist until slurmd restarts (23.11 on: reconfigure re-executes
    it, scontrol.1); the case's plugin runs in job steps only."""
    return "spank.8: slurmd-context plugins need slurmd restarted" + (
        "; from 23.11 reconfigure re-executes slurmd (scontrol.1)" if release >= "23.11" else "")


CASES = [
    Case("remove a node", without_gpu02, ctld=remove_node, removed=("gpu02",), documented=nodes_documented),
    Case("add a node", with_gpu02, ctld=add_node, slurmd=lambda bed: runs(bed, "-w gpu02 hostname", "gpu02"),
         before=lambda f: f if "NodeName=gpu01 " in (f["slurm.conf"] or "") else without_gpu02(f),
         absent=("gpu02",), added=("gpu02",), documented=nodes_documented),
    Case("add a partition", edit(slurm_conf=lambda t: (t or "") + "PartitionName=extra Nodes=gpu02 MaxTime=10\n"),
         ctld=lambda bed: expect(show(bed, "partition extra"), r"PartitionName=extra ", "no partition extra"),
         slurmd=lambda bed: runs(bed, "-p extra hostname", "gpu02", "job in extra")),
    Case("partition MaxTime", edit(slurm_conf=lambda t: sub(t, r"MaxTime=INFINITE", "MaxTime=77")),
         ctld=partition_maxtime),
    Case("Prolog", edit(slurm_conf=lambda t: (t or "") + f"Prolog={ETC}/prolog.sh\n", prolog_sh=lambda t: PROLOG),
         slurmd=prolog),
    Case("plugstack.conf", edit(plugstack_conf=lambda t: (t or "") + f"required {PLUGIN}\n"), slurmd=plugstack,
         documented=spank_documented),
    Case("TopologyPlugin (topology/tree, topology.conf)",
         edit(slurm_conf=lambda t: (t or "") + "TopologyPlugin=topology/tree\n",
              topology_conf=lambda t: "SwitchName=s0 Nodes=gpu[01-02]\n"),
         ctld=lambda bed: expect(sh(bed, "ctl", "scontrol show topology")[1], r"SwitchName=s0 .*Nodes=gpu\[01-02\]",
                                 "scontrol show topology has no s0")),
    Case("cgroup.conf key", edit(cgroup_conf=lambda t: (t or "") + "AllowedRAMSpace=90\n"),
         unobservable=no_cgroup_plugin),
    Case("GresTypes (gpu -> gpu,foo; node Gres, gres.conf)",
         edit(slurm_conf=lambda t: sub(sub(t, r"^GresTypes=gpu$", "GresTypes=gpu,foo"), r"Gres=gpu:8",
                                       "Gres=gpu:8,foo:2"),
              gres_conf=lambda t: (t or "") + "NodeName=gpu[01-02] Name=foo Count=2\n"),
         ctld=gres_types, slurmd=lambda bed: runs(bed, "-w gpu02 --gres=foo:1 hostname", "gpu02", "--gres=foo:1")),
    Case("node GRES (gpu:4 -> gpu:8, gres.conf)", gpu8, ctld=node_gres, before=gpu4,
         slurmd=lambda bed: runs(bed, "-w gpu02 --gres=gpu:8 printenv CUDA_VISIBLE_DEVICES", r"0,1,2,3,4,5,6,7",
                                 "slurmd's GPUs for gpu:8")),
    Case("SlurmdPort", edit(slurm_conf=lambda t: sub(t, r"^SlurmdPort=6818", "SlurmdPort=6828")),
         ctld=slurmd_port_ctld, slurmd=slurmd_port),
    Case("node CPUs", edit(slurm_conf=lambda t: sub(t, r"CPUs=16", "CPUs=32")), ctld=node_cpus,
         slurmd=lambda bed: runs(bed, "-w gpu02 -n 32 true", what="32-task job on gpu02")),
]

