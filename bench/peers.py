"""Issue 15 item 5: the no-op reconcile and the daemon's drift check against peers, in the same run, same testbed.

For each N one converged testbed (N compute nodes + ctl; the light profile above 64 when this checkout's testbed
has it) serves both sections. Every run runs every tool once, in an order that rotates from run to run, so
that the machine's noise hits all alike; ratios are medians of the per-run ratios.

noop (nothing to change; every tool starts without connections):
- ours: `reconciler plan DIR` (must exit 0), SSH round trips counted (`bench.counted_cli`);
- ansible: `ansible-playbook --check --diff` with Ansible's best settings: pipelining on, forks = nodes,
  `gathering = explicit`, ControlPersist (masters closed before each run); every host must say changed=0;
- pyinfra: `pyinfra --dry` of a deploy over the same files (`bench.pyinfra_project`); no change detected;
- floor-ssh: one `true` per node over plain OpenSSH, forks at a time; floor-paramiko: connect, exec `true`,
  close per node from a thread pool, in a fresh Python process (`bench.floor`);
- other-1, other-2, ... (`--compare DIR`, repeatable): `reconciler plan` of another checkout (e.g. a `git
  worktree` of an older commit), run by that checkout's own `bench.counted_cli` with PYTHONPATH and the working
  directory set to it, on the same testbed and in the same rotation: before/after comparisons within one run.
  Each plan row also gets its per-run ratio to the paramiko floor of the same run (`vs_floor`).

drift (steady state of a running daemon; connections already open where the tool can keep them):
- ours: one drift check of the daemon's loop over persistent sessions (`bench.drift_probe`: report mode,
  in-sync, no new connection), against a cold `reconciler plan` (the issue's target: 3x faster at 256);
- ansible: the same best-settings check run with the ControlPersist masters of the previous run kept;
- floor-ssh: `true` through an open ControlMaster; floor-paramiko: exec `true` over open connections.

Client CPU seconds: RUSAGE_CHILDREN deltas for subprocesses (the tool and its ssh/ProxyCommand children that
were waited for); the long-lived probes report their own process CPU plus their live ProxyCommand children's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench import floor
from bench.ansible_project import AnsibleProject, ansible_playbook, recap
from bench.common import REPO, Timed, log, median, python_env, timed_run
from bench.pyinfra_project import PyinfraProject, detected_changes, pyinfra_binary
from bench.reconcile import ours
from bench.testbed import BenchTestbed, supports_light

PEERS = ("ansible", "pyinfra", "floor")
LIGHT_ABOVE = 64  # N above this needs the light testbed profile

LABELS = {
    ("noop", "ours"): "`reconciler plan` (cold)",
    ("noop", "ansible"): "Ansible, best settings (`--check --diff`)",
    ("noop", "pyinfra"): "pyinfra `--dry`",
    ("noop", "gateways"): "`reconciler plan` (cold) through ClusterShell gateways",
    ("noop", "floor-ssh"): "floor: `ssh node true` (OpenSSH)",
    ("noop", "floor-paramiko"): "floor: paramiko connect + `true` + close",
    ("drift", "ours"): "daemon drift check (persistent sessions)",
    ("drift", "plan"): "`reconciler plan` (cold)",
    ("drift", "ansible"): "Ansible, best settings, ControlPersist warm",
    ("drift", "floor-ssh"): "floor: `ssh node true` via open ControlMaster",
    ("drift", "floor-paramiko"): "floor: paramiko `true` over open connections",
}


class NoLightProfile(RuntimeError):
    """N needs the light testbed profile and this checkout's testbed has none."""


def parse_peers(text: str) -> list[str]:
    """`none`, `all`, or a comma-separated subset of ansible,pyinfra,floor."""
    if text.strip() in ("", "none"):
        return []
    if text.strip() == "all":
        return list(PEERS)
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = sorted(set(chosen) - set(PEERS))
    if unknown:
        raise SystemExit(f"unknown peer(s): {', '.join(unknown)}; choose from {', '.join(PEERS)}, all or none")
    return [p for p in PEERS if p in chosen]


def peers_unavailable(peers: list[str]) -> str | None:
    """Why a chosen peer cannot run here, or None."""
    if "ansible" in peers and ansible_playbook() is None:
        return "ansible-playbook not found (pip install -e '.[bench]')"
    if "pyinfra" in peers and pyinfra_binary() is None:
        return "pyinfra not found (pip install -e '.[bench]')"
    return None


@dataclass
class Sample:
    """One run of one tool: wall and client CPU seconds, and what else it reported."""

    wall_s: float
    cpu_s: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Series:
    """Every run of every tool of one section at one N."""

    section: str
    computes: int
    nodes: int
    tools: list[str]
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    light: bool = False
    forks: int = 0
    labels: dict[str, str] = field(default_factory=dict)  # a tool's label where LABELS' does not say enough
    optional: set[str] = field(default_factory=set)  # tools whose failure is recorded, not the section's end
    failed: dict[str, str] = field(default_factory=dict)  # optional tool -> why it was dropped from the runs

    def add(self, tool: str, sample: Sample) -> None:
        """Record one run."""
        self.samples.setdefault(tool, []).append(sample)

    def rows(self) -> list[dict[str, Any]]:
        """One row per tool: medians, runs, CPU per node, ratio to ours (median of per-run ratios)."""
        base = self.samples.get("ours", [])
        floor_runs = self.samples.get("floor-paramiko", [])
        out = []
        for tool in self.tools:
            runs = self.samples.get(tool, [])
            if not runs:  # an optional tool that failed before its first run
                continue
            ratios = [s.wall_s / b.wall_s for s, b in zip(runs, base, strict=False) if b.wall_s]
            row: dict[str, Any] = {
                "section": self.section, "computes": self.computes, "nodes": self.nodes, "tool": tool,
                "label": self.labels.get(tool) or LABELS[(self.section, tool)], "runs": len(runs),
                "light": self.light, "forks": self.forks,
                "wall_s": median([s.wall_s for s in runs]), "wall_runs_s": [round(s.wall_s, 3) for s in runs],
                "cpu_s": median([s.cpu_s for s in runs]), "cpu_runs_s": [round(s.cpu_s, 3) for s in runs],
                "cpu_per_node_ms": median([s.cpu_s for s in runs]) / self.nodes * 1000,
                "vs_ours": median(ratios), "vs_ours_runs": [round(r, 2) for r in ratios],
            }
            if floor_runs and (tool == "ours" or tool.startswith("other-")):
                to_floor = [s.wall_s / f.wall_s for s, f in zip(runs, floor_runs, strict=False) if f.wall_s]
                row["vs_floor"], row["vs_floor_runs"] = median(to_floor), [round(r, 2) for r in to_floor]
            for key in sorted({k for s in runs for k in s.extra}):
                values = [s.extra[key] for s in runs if key in s.extra]
                row[key] = median(values) if all(isinstance(v, int | float) for v in values) else values
            out.append(row)
        return out


# ------------------------------------------------------------------------------------------------ noop tools


def _ours_plan(bed: BenchTestbed, state: Path | None = None, gateways: int = 0) -> Sample:
    """`reconciler plan` of the testbed's desired state (or STATE: the copy with GATEWAYS gateways); exit 0 required."""
    done, trips = ours("plan", str(state or bed.desired), work=bed.work)
    if done.returncode != 0:
        via = " through gateways" if gateways else ""
        raise RuntimeError(f"reconciler plan{via} found changes or failed (exit {done.returncode}):\n{done.tail(40)}")
    if gateways:  # the counted transport is the direct one: ctl and the gateways
        return Sample(done.seconds, done.cpu, {"gateways": gateways, "direct_round_trips": sum(trips.values())})
    return Sample(done.seconds, done.cpu, {"trips_per_node": sum(trips.values()) / max(1, len(trips))})


def other_checkout(tree: Path) -> str:
    """The compared checkout's commit (short), for labels; its bytecode written as this checkout's is."""
    from bench.common import compile_bytecode

    compile_bytecode(tree)
    shown = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=60, check=False)
    return shown.stdout.strip() or str(tree)


def _other_plan(bed: BenchTestbed, tree: Path) -> Sample:
    """`reconciler plan` by the checkout TREE's own code (its bench.counted_cli); exit 0 required."""
    counters = bed.work / "round-trips-other.json"
    counters.unlink(missing_ok=True)
    env = python_env()
    env["PYTHONPATH"] = str(tree)
    done = timed_run([sys.executable, "-m", "bench.counted_cli", str(counters), "plan", str(bed.desired)], env=env,
                     cwd=tree, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"reconciler plan of {tree} found changes or failed (exit {done.returncode}):\n"
                           f"{done.tail(40)}")
    trips = json.loads(counters.read_text())["round_trips"] if counters.exists() else {}
    return Sample(done.seconds, done.cpu, {"trips_per_node": sum(trips.values()) / max(1, len(trips))})


def _check_noop_recap(done: Timed, hosts: list[str]) -> None:
    stats = recap(done.stdout)
    problems = [h for h in hosts if h not in stats or stats[h]["failed"] or stats[h]["unreachable"]
                or stats[h]["changed"]]
    if done.returncode != 0 or problems:
        raise RuntimeError(f"ansible-playbook --check did not report every node unchanged (rc {done.returncode}; "
                           f"hosts {problems[:5]}):\n{done.tail(40)}")


def _ansible(project: AnsibleProject, bed: BenchTestbed, *, cold: bool) -> Sample:
    done = project.run("--check", "--diff", cold=cold)
    _check_noop_recap(done, bed.nodes)
    trips = project.count_round_trips()
    return Sample(done.seconds, done.cpu, {"trips_per_node": sum(trips.values()) / max(1, len(trips))})


def _pyinfra(project: PyinfraProject) -> Sample:
    done = project.run()
    output = done.stdout + "\n" + done.stderr
    changes = detected_changes(output)
    if done.returncode != 0 or changes:
        raise RuntimeError(f"pyinfra --dry failed or detected changes (rc {done.returncode}): {changes[:5]}\n"
                           f"{done.tail(40)}")
    return Sample(done.seconds, done.cpu)


def _floor_ssh(bed: BenchTestbed, forks: int, control_dir: Path | None = None) -> Sample:
    done = floor.openssh(bed.ssh_config, bed.nodes, forks, control_dir)
    if done.returncode != 0:
        raise RuntimeError(f"ssh true: {done.stderr}")
    return Sample(done.seconds, done.cpu)


def _floor_paramiko(bed: BenchTestbed, forks: int) -> Sample:
    done = timed_run([sys.executable, "-m", "bench.floor", "paramiko", str(bed.ssh_config), str(forks),
                      *bed.nodes], env=python_env(), cwd=REPO, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"paramiko floor failed:\n{done.tail(20)}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if found["failed"]:
        raise RuntimeError(f"paramiko floor: `true` failed on {found['failed'][:5]}")
    return Sample(done.seconds, done.cpu, {"inner_s": found["inner_s"]})


def gateways_unavailable(bed: BenchTestbed) -> str | None:
    """Why the gateway variant cannot run here (None: it can): a light testbed (its nodes hold the ssh_config,
    key and known_hosts a gateway relays with), ClusterShell for this Python and for the nodes'."""
    if not bed.light:
        return "the full testbed profile's nodes lack the client files a gateway relays with (use --light)"
    try:
        import ClusterShell  # noqa: F401
    except ImportError:
        return "ClusterShell is not installed for this Python (pip install -e '.[dev]')"
    if not Path("/usr/lib/python3/dist-packages/ClusterShell").is_dir():
        return "the nodes' python3 has no ClusterShell (deploy/testbed/testbed deps installs python3-clustershell)"
    return None


def gateway_layout(computes: list[str]) -> dict[str, list[str]]:
    """Gateways for the compute nodes: one per 64 (at least 2), each the first of its share; ctl stays direct."""
    count = max(2, len(computes) // 64)
    gateways, rest = computes[:count], computes[count:]
    share = -(-len(rest) // count)  # contiguous shares: short hostlists (gpu[003-009])
    return {gw: rest[i * share:(i + 1) * share] for i, gw in enumerate(gateways)}


def gateway_state(bed: BenchTestbed) -> tuple[Path, int]:
    """A copy of the testbed's desired state with `ssh.gateways` (gateway_layout); its path and gateway count."""
    from ruamel.yaml import YAML

    from reconciler.common.hostlist import compress

    into = bed.work / "desired-gateways"
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(bed.desired, into)
    layout = gateway_layout(bed.nodes[1:])
    yaml = YAML()
    nodes_file = into / "nodes.yaml"
    data = yaml.load(nodes_file.read_text())
    data["ssh"]["gateways"] = [{"name": gw, "nodes": compress(behind)} for gw, behind in layout.items() if behind]
    with nodes_file.open("w") as out:
        yaml.dump(data, out)
    return into, len(layout)


# ------------------------------------------------------------------------------------------------ drift tools


class LineProcess:
    """A long-lived measuring process: one JSON line back per line sent (bench.drift_probe, bench.floor warm)."""

    def __init__(self, argv: list[str], tree: Path | None = None) -> None:
        """TREE: run another checkout's code (its bench and reconciler), as `--compare` does."""
        self.argv = argv
        env = python_env()
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, cwd=tree or REPO)
        self.first = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(30)
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"{' '.join(self.argv[:4])} ended (exit {self.proc.returncode}):\n{err[-3000:]}")
        found: dict[str, Any] = json.loads(line)
        return found

    def ask(self) -> dict[str, Any]:
        """Send one line, read one JSON line."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """End it (EOF on stdin) and wait."""
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _drift_check(probe: LineProcess, connects: int) -> Sample:
    found = probe.ask()
    if found["outcome"] != "in-sync":
        raise RuntimeError(f"drift check said {found['outcome']!r}, not in-sync (see the probe's daemon.log)")
    if found["connects"] != connects:
        raise RuntimeError(f"drift check opened connections: {found['connects']} connects, {connects} after the first")
    return Sample(found["wall_s"], found["cpu_s"], {"gather_s": found["gather_s"], "plan_s": found["plan_s"]})


def _paramiko_warm(process: LineProcess) -> Sample:
    found = process.ask()
    if found["failed"]:
        raise RuntimeError(f"paramiko warm floor: `true` failed on {found['failed'][:5]}")
    return Sample(found["wall_s"], found["cpu_s"])


# ------------------------------------------------------------------------------------------------ runs


def _rotate(tools: list[str], run: int) -> list[str]:
    shift = run % len(tools)
    return tools[shift:] + tools[:shift]


def _runs(series: Series, runs: int, measure: dict[str, Callable[[], Sample]]) -> None:
    for run in range(runs):
        for tool in _rotate(series.tools, run):
            if tool in series.failed:
                continue
            try:
                series.add(tool, measure[tool]())
            except RuntimeError as exc:
                if tool not in series.optional:
                    raise
                lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or ["?"]
                series.failed[tool] = " ... ".join(dict.fromkeys([lines[0], lines[-1]]))[:400]
                log(f"{series.section} N={series.computes}: {tool} failed, left out of the later runs: "
                    f"{series.failed[tool]}")
        line = ", ".join(f"{t} {series.samples[t][-1].wall_s:.2f} s" for t in series.tools
                         if t not in series.failed and series.samples.get(t))
        log(f"{series.section} N={series.computes} run {run + 1}: {line}")


def _noop(bed: BenchTestbed, runs: int, peers: list[str], best: AnsibleProject | None,
          pyinfra: PyinfraProject | None, compare: list[Path] | None = None) -> Series:
    forks = len(bed.nodes)
    why_not = gateways_unavailable(bed)
    if why_not:
        log(f"noop N={bed.computes}: no run through ClusterShell gateways: {why_not}")
    others = {f"other-{i}": tree for i, tree in enumerate(compare or [], start=1)}
    tools = ["ours", *others] + ([] if why_not else ["gateways"]) + (
        ["ansible"] if best else []) + (
        ["pyinfra"] if pyinfra else []) + (["floor-ssh", "floor-paramiko"] if "floor" in peers else [])
    state, count = (bed.desired, 0) if why_not else gateway_state(bed)
    measure: dict[str, Callable[[], Sample]] = {
        "ours": lambda: _ours_plan(bed),
        "gateways": lambda: _ours_plan(bed, state, count),
        "floor-ssh": lambda: _floor_ssh(bed, forks),
        "floor-paramiko": lambda: _floor_paramiko(bed, forks),
    }
    if best:
        measure["ansible"] = lambda: _ansible(best, bed, cold=True)
    if pyinfra:
        measure["pyinfra"] = lambda: _pyinfra(pyinfra)
    labels = {}
    for tool, tree in others.items():
        measure[tool] = partial(_other_plan, bed, tree)
        labels[tool] = f"`reconciler plan` (cold) of {other_checkout(tree)} (--compare)"
    series = Series("noop", bed.computes, len(bed.nodes), tools, light=bed.light, forks=forks, labels=labels,
                    optional={"gateways"})  # an extra: its failure must not cost the direct figures
    _runs(series, runs, measure)
    return series


def _drift(bed: BenchTestbed, runs: int, peers: list[str], best: AnsibleProject | None,
           compare: list[Path] | None = None) -> Series:
    forks = len(bed.nodes)
    others = {f"other-{i}": tree for i, tree in enumerate(compare or [], start=1)}
    tools = ["ours", "plan"] + (["ansible"] if best else []) + (
        ["floor-ssh", "floor-paramiko"] if "floor" in peers else []) + list(others)
    probe = LineProcess([sys.executable, "-m", "bench.drift_probe", str(bed.desired), str(bed.work / "drift")])
    opened: list[Callable[[], None]] = [probe.close]
    labels = {}
    try:
        if probe.first["outcome"] != "in-sync":
            raise RuntimeError(f"the daemon's first cycle said {probe.first['outcome']!r}, not in-sync")
        log(f"drift N={bed.computes}: daemon's first cycle {probe.first['wall_s']:.2f} s, "
            f"{probe.first['connects']} connections")
        measure: dict[str, Callable[[], Sample]] = {
            "ours": lambda: _drift_check(probe, probe.first["connects"]),
            "plan": lambda: _ours_plan(bed),
        }
        if best:
            _ansible(best, bed, cold=True)  # opens the ControlPersist masters the timed runs reuse
            measure["ansible"] = lambda: _ansible(best, bed, cold=False)
        if "floor" in peers:
            control = Path(tempfile.mkdtemp(prefix="cm", dir="/tmp"))  # short: a socket path has 108 bytes at most
            opened.append(lambda: shutil.rmtree(control, ignore_errors=True))
            opened.append(lambda: floor.close_masters(bed.ssh_config, bed.nodes, control))
            _floor_ssh(bed, forks, control)  # opens the ControlMasters
            warm = LineProcess([sys.executable, "-m", "bench.floor", "paramiko-warm", str(bed.ssh_config),
                                str(forks), *bed.nodes])
            opened.append(warm.close)
            measure["floor-ssh"] = lambda: _floor_ssh(bed, forks, control)
            measure["floor-paramiko"] = lambda: _paramiko_warm(warm)
        for tool, tree in others.items():  # the other checkout's own daemon loop, on the same testbed
            other = LineProcess([sys.executable, "-m", "bench.drift_probe", str(bed.desired),
                                 str(bed.work / f"drift-{tool}")], tree=tree)
            opened.append(other.close)
            if other.first["outcome"] != "in-sync":
                raise RuntimeError(f"{tool}'s first cycle said {other.first['outcome']!r}, not in-sync")
            measure[tool] = partial(_drift_check, other, other.first["connects"])
            labels[tool] = f"daemon drift check of {other_checkout(tree)} (--compare)"
        series = Series("drift", bed.computes, len(bed.nodes), tools, light=bed.light, forks=forks, labels=labels)
        _runs(series, runs, measure)
        series.samples["ours"][0].extra["first_cycle_s"] = probe.first["wall_s"]
        return series
    finally:
        for close in reversed(opened):
            close()


def measure(computes: int, index: int, runs: int, sections: list[str], peers: list[str], *,
            light: bool = False, compare: list[Path] | None = None) -> list[Series]:
    """Bring up one testbed for N and run the chosen sections (noop, drift) with the chosen peers on it (and with
    COMPARE, the no-op plan of each of those other checkouts)."""
    light = light or computes > LIGHT_ABOVE
    if light and not supports_light():
        raise NoLightProfile(f"N={computes} needs the light testbed profile (`deploy/testbed/testbed up --light`), "
                           "which this checkout's testbed does not have")
    out: list[Series] = []
    with BenchTestbed(computes, index, light=light) as bed:
        forks = len(bed.nodes)
        best = None
        if "ansible" in peers:
            best = AnsibleProject(root=bed.work / "ansible-best", ssh_config=bed.ssh_config, hosts=bed.nodes,
                                  forks=forks, pipelining=True, gathering="explicit", persist="30m")
            best.write(bed.desired)
        pyinfra = None
        if "pyinfra" in peers:
            pyinfra = PyinfraProject(bed.work / "pyinfra", bed.ssh_config, bed.known_hosts, bed.nodes, forks)
            pyinfra.write(bed.desired)
        try:
            if "noop" in sections:
                out.append(_noop(bed, runs, peers, best, pyinfra, compare))
            if "drift" in sections:
                out.append(_drift(bed, runs, peers, best, compare))
        finally:
            if best:
                best.close_masters()
    return out
