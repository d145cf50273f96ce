"""NCCL checks through Slurm (or, in local mode, straight on nodes reached over SSH): which nodes to test,
the exact command lines, running them, judging the output.

`plan_nccl` decides from Slurm's view which target nodes run (idle ones by default), which are retested
(drained by this very check: resumed inside a maintenance reservation first, since Slurm never starts a
job on a drained node) and which are skipped, and groups them by mode: one srun per node (single-node),
disjoint pairs (pairs), or one srun over every node (partition). `launch_command` builds the srun line;
`batch_script` runs a wave of them in parallel on the login node in one SSH command; `judge_step` parses
the output with the nccl-tests parser and judges it with `checks.nccl.verdict.evaluate`.

Local mode (`mode: local`, `local_command`, `run_local`) needs no Slurm: each target node runs the binary
itself over SSH, one process driving all its GPUs with nccl-tests' threads (`-g N`), after a guard that
refuses to start while other processes use the GPUs. It never drains (there may be no Slurm to ask).
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.checks.nccl.binary import collective_from_binary
from reconciler.checks.nccl.models import NcclTest
from reconciler.checks.nccl.parser import parse_output
from reconciler.checks.nccl.verdict import RegressionPolicy, Thresholds, evaluate, format_size, representative_busbw
from reconciler.checks.results import CheckResult, utcnow
from reconciler.checks.slurm_view import SlurmView
from reconciler.common import hostlist
from reconciler.desired.inventory import NodeSpec
from reconciler.facts.sections import section, split_sections
from reconciler.model import DesiredState, NcclCheck, parse_duration, parse_size
from reconciler.transport.base import Transport

IMMEDIATE = 60  # seconds srun may wait for its allocation (--immediate) before giving up: never queue behind jobs
KILL_AFTER = 30  # seconds between timeout's TERM and KILL of a hung srun
JOB_PREFIX = "reconciler-nccl-"
RANK0 = re.compile(r"^# reconciler: job (?P<job>\S+) step (?P<step>\S+) rank 0 on (?P<host>\S+)\s*$", re.MULTILINE)
# Node state flags that keep a job off an idle node (or make a run there meaningless).
UNAVAILABLE_FLAGS = {"RESERVED", "MAINTENANCE", "MAINT", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP",
                     "POWER_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "FAIL", "NOT_RESPONDING", "PLANNED"}
# Printed by rank 0 before the test binary starts: proves the step ran, names the job and the node.
STEP_PRELUDE = ('[ "${SLURM_PROCID:-0}" != 0 ] || '
                'echo "# reconciler: job ${SLURM_JOB_ID:-?} step ${SLURM_STEP_ID:-?} rank 0 on $(hostname)"')
# Local mode: refuse to start while other processes hold the GPUs (exit 75, no prelude: "not run"), then the
# same prelude line, with job "local" and the shell's pid as the step.
LOCAL_BUSY = 75
LOCAL_GUARD = ("! command -v nvidia-smi >/dev/null || "
               '[ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] || '
               "{ echo \"reconciler: GPUs in use by other processes, not started\"; exit " + str(LOCAL_BUSY) + "; }")
LOCAL_PRELUDE = 'echo "# reconciler: job local step $$ rank 0 on $(hostname)"'
GPU_OPTIONS = ("-g", "--ngpus")


@dataclass(frozen=True)
class Group:
    """The nodes of one srun and the nodes its outcome judges (a borrowed pair partner is not judged)."""

    nodes: tuple[str, ...]
    judged: tuple[str, ...]
    reserved: bool = False


@dataclass
class NcclPlan:
    """What one NCCL check will do: nodes run, nodes retested after a resume, skipped results, waves."""

    check: NcclCheck
    run: list[str] = field(default_factory=list)
    retest: list[str] = field(default_factory=list)
    skipped: list[CheckResult] = field(default_factory=list)
    waves: list[list[Group]] = field(default_factory=list)

    @property
    def reserve(self) -> list[str]:
        """Nodes to put in the maintenance reservation: every node of a group that holds a retest node."""
        found: list[str] = []
        for wave in self.waves:
            for group in wave:
                if group.reserved:
                    found += [n for n in group.nodes if n not in found]
        return found


@dataclass(frozen=True)
class StepRun:
    """What one srun printed, its exit status and wall seconds (measured on the login node)."""

    output: str
    rc: int | None
    seconds: float


# ---------------------------------------------------------------- command lines (pure)


def step_argv(check: NcclCheck) -> list[str]:
    """The job step: a tiny sh wrapper (rank 0 says where it runs; the env profile is sourced) then the binary."""
    prelude = STEP_PRELUDE
    if check.env_profile:
        prelude += f"; . {shlex.quote(check.env_profile)} || exit 1"
    return ["sh", "-c", prelude + '; exec "$@"', "sh", check.binary, *check.args]


def srun_argv(check: NcclCheck, nodes: Sequence[str], *, reservation: str | None = None) -> list[str]:
    """The srun argument vector for one run of CHECK on NODES."""
    argv = ["srun", f"--job-name={JOB_PREFIX}{check.name}"]
    if check.partition:
        argv.append(f"--partition={check.partition}")
    if reservation:
        argv.append(f"--reservation={reservation}")
    argv += [f"--nodes={len(nodes)}", f"--nodelist={hostlist.compress(nodes)}",
             f"--ntasks-per-node={check.ntasks_per_node}"]
    if check.gpus_per_task:
        argv.append(f"--gpus-per-task={check.gpus_per_task}")
    argv += ["--exclusive", f"--immediate={IMMEDIATE}", f"--time={math.ceil(parse_duration(check.timeout) / 60)}",
             "--kill-on-bad-exit=1"]
    if check.mpi:
        argv.append(f"--mpi={check.mpi}")
    if check.container_image:
        argv.append(f"--container-image={check.container_image}")
    if check.container_mounts:
        argv.append(f"--container-mounts={','.join(check.container_mounts)}")
    argv.append("--export=ALL")
    return argv + step_argv(check)


def launch_command(check: NcclCheck, nodes: Sequence[str], *, reservation: str | None = None) -> str:
    """The shell line run on the login node: a hard timeout, the NCCL environment, srun.

    The environment is set on srun's own command line (`env K=V`) and passed on by `--export=ALL`,
    because `--export=ALL,K=V` cannot carry values holding commas (NCCL_IB_HCA=mlx5_0,mlx5_1).
    """
    limit = parse_duration(check.timeout) + IMMEDIATE
    words = ["timeout", "-k", str(KILL_AFTER), str(limit)]
    if check.env:
        words += ["env", *(f"{key}={value}" for key, value in check.env.items())]
    return shlex.join(words + srun_argv(check, nodes, reservation=reservation))


def local_gpus(check: NcclCheck) -> int:
    """GPUs the one local process drives: ntasks_per_node x gpus_per_task (at least one per task)."""
    return check.ntasks_per_node * max(1, check.gpus_per_task)


def local_argv(check: NcclCheck) -> list[str]:
    """The binary and its arguments for local mode: any -g/--ngpus replaced by `-g local_gpus`."""
    args: list[str] = []
    skip = False
    for arg in check.args:
        if skip:
            skip = False
        elif arg in GPU_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in GPU_OPTIONS)):
            args.append(arg)
    return [check.binary, *args, "-g", str(local_gpus(check))]


def local_command(check: NcclCheck) -> str:
    """The shell line a node runs in local mode: a hard timeout, the NCCL environment, the guarded binary."""
    prelude = (LOCAL_GUARD + "; " if check.only_idle else "") + LOCAL_PRELUDE
    if check.env_profile:
        prelude += f"; . {shlex.quote(check.env_profile)} || exit 1"
    words = ["timeout", "-k", str(KILL_AFTER), str(parse_duration(check.timeout))]
    if check.env:
        words += ["env", *(f"{key}={value}" for key, value in check.env.items())]
    return shlex.join(words + ["sh", "-c", prelude + '; exec "$@"', "sh", *local_argv(check)])


def groups_for(check: NcclCheck, nodes: Sequence[str], reserved: set[str] | None = None) -> list[list[Group]]:
    """The waves of sruns for a mode; groups within a wave share no node and run at the same time."""
    reserved = reserved or set()

    def group(members: Sequence[str], judged: Sequence[str]) -> Group:
        return Group(tuple(members), tuple(judged), any(m in reserved for m in members))

    nodes = list(nodes)
    if not nodes:
        return []
    if check.mode in ("single-node", "local"):
        return [[group([n], [n]) for n in nodes]]
    if check.mode == "partition":
        return [[group(nodes, nodes)]]
    pairs = [group(nodes[i:i + 2], nodes[i:i + 2]) for i in range(0, len(nodes) - 1, 2)]
    waves = [pairs] if pairs else []
    if len(nodes) % 2 == 1 and len(nodes) > 1:
        waves.append([group([nodes[-1], nodes[0]], [nodes[-1]])])  # the odd node borrows the first as partner
    return waves


def batch_script(lines: Sequence[str]) -> str:
    """Run launch lines in parallel on one node; print each one's output, exit status and wall time."""
    out = ["d=$(mktemp -d /tmp/reconciler-nccl.XXXXXX) || exit 1"]
    for i, line in enumerate(lines):
        out.append(f'( s=$(date +%s.%N); ( {line} ) </dev/null >"$d/{i}.out" 2>&1; rc=$?; '
                   f'echo "$rc $s $(date +%s.%N)" >"$d/{i}.rc" ) &')
    out.append("wait")
    for i in range(len(lines)):
        out.append(section(f"time.{i}", f'cat "$d/{i}.rc"'))
        out.append(section(f"step.{i}", f'cat "$d/{i}.out"; (exit $(cut -d" " -f1 "$d/{i}.rc"))'))
    out.append('rm -rf -- "$d"')
    return "\n".join(out) + "\n"


def parse_batch(output: str, count: int) -> list[StepRun]:
    """The StepRun of each of COUNT launch lines from batch_script's output (rc None when missing)."""
    sections = split_sections(output)
    runs = []
    for i in range(count):
        step, times = sections.get(f"step.{i}"), sections.get(f"time.{i}")
        seconds = 0.0
        if times is not None and times.lines:
            fields = times.lines[0].split()
            if len(fields) == 3:
                try:
                    seconds = max(0.0, float(fields[2]) - float(fields[1]))
                except ValueError:
                    seconds = 0.0
        runs.append(StepRun(step.output if step else "", step.rc if step else None, seconds))
    return runs


def reservation_create_command(name: str, nodes: Sequence[str], minutes: int) -> str:
    """scontrol command reserving NODES for root from now on (maint: not billed; ignore_jobs: no race)."""
    return shlex.join(["scontrol", "create", "reservation", f"reservationname={name}", "starttime=now",
                       f"duration={minutes}", f"nodes={hostlist.compress(nodes)}", "users=root",
                       "flags=maint,ignore_jobs"])


def cancel_command(checks: Sequence[str]) -> str:
    """scancel line for the jobs of these NCCL checks (their srun job names), to stop a run in flight."""
    return "; ".join(shlex.join(["scancel", f"--name={JOB_PREFIX}{name}"]) for name in checks) or "true"


def reservation_delete_command(name: str) -> str:
    """scontrol command deleting a reservation."""
    return shlex.join(["scontrol", "delete", f"reservationname={name}"])


# ---------------------------------------------------------------- planning (pure)


def nccl_targets(check: NcclCheck, state: DesiredState, view: SlurmView, only: set[str] | None = None) -> list[str]:
    """The nodes a check is about: its `nodes`, else its partition's (desired state first, else Slurm's)."""
    if check.nodes:
        nodes = hostlist.expand(check.nodes)
    else:
        declared = [p for p in state.cluster.partitions if p.name == check.partition]
        nodes = (hostlist.expand(declared[0].nodes or "") if declared
                 else view.nodes_in_partition(check.partition or ""))
    return [n for n in nodes if only is None or n in only]


def _skip(check: NcclCheck, node: str, message: str, *, error: bool = False) -> CheckResult:
    """A result for a node that was not run."""
    return CheckResult(check=check.name, kind="nccl", node=node, ok=not error, skipped=not error, error=error,
                       message=message)


def plan_nccl(check: NcclCheck, state: DesiredState, view: SlurmView, only: set[str] | None = None, *,
              act: bool = True, owns: Callable[[str | None], bool] = lambda _: False,
              blocked: dict[str, str] | None = None) -> NcclPlan:
    """Sort the check's nodes into run, retest and skipped, and group them into waves.

    OWNS tells whether a drain reason is this check's; BLOCKED maps a node to another check that still fails
    on it (no retest then: the drain stays until that one passes).
    """
    blocked = blocked or {}
    plan = NcclPlan(check=check)
    targets = nccl_targets(check, state, view, only)
    if view.error:
        plan.skipped = [_skip(check, n, f"not run: Slurm's view is unavailable ({view.error})", error=True)
                        for n in targets]
        return plan
    for node in targets:
        fact = view.nodes.get(node)
        if fact is None:
            plan.skipped.append(_skip(check, node, "not run: node not known to Slurm", error=True))
            continue
        flags = fact.flags
        busy = view.jobs_on(node)
        base = view.base_state(node)
        if fact.drained:
            if not owns(fact.reason):
                plan.skipped.append(_skip(check, node, f"skipped: drained ({fact.reason or 'no reason'})"))
            elif busy or base != "IDLE":
                plan.skipped.append(_skip(check, node, f"skipped: drained by this check, still {fact.state}"))
            elif node in blocked:
                plan.skipped.append(_skip(check, node, f"skipped: drained by this check; {blocked[node]} still fails"))
            elif not act:
                plan.skipped.append(_skip(check, node, "skipped: drained by this check; a retest resumes it "
                                                       "inside a reservation, not done without actions"))
            else:
                plan.retest.append(node)
            continue
        unavailable = sorted(flags & UNAVAILABLE_FLAGS)
        if not fact.responding or base in ("DOWN", "FUTURE", "UNKNOWN") or unavailable:
            plan.skipped.append(_skip(check, node, f"skipped: node is {fact.state}"))
        elif check.only_idle and (busy or base != "IDLE"):
            jobs = f", jobs {','.join(j.job_id for j in busy)}" if busy else ""
            plan.skipped.append(_skip(check, node, f"skipped: not idle ({fact.state}{jobs})"))
        else:
            plan.run.append(node)
    chosen = [n for n in targets if n in plan.run or n in plan.retest]
    if check.mode == "pairs" and len(chosen) == 1:
        plan.skipped.append(_skip(check, chosen[0], "skipped: pairs mode needs a second idle node"))
        plan.run, plan.retest, chosen = [], [], []
    plan.waves = groups_for(check, chosen, set(plan.retest))
    return plan


# ---------------------------------------------------------------- judging (pure)


def thresholds_of(check: NcclCheck) -> tuple[Thresholds, RegressionPolicy | None]:
    """The verdict's thresholds and regression policy for a check."""
    limits = check.thresholds
    thresholds = Thresholds(collective=collective_from_binary(check.binary), min_busbw=limits.min_busbw,
                            min_size=parse_size(limits.at_size), min_avg_busbw=limits.min_avg_busbw,
                            max_wrong=limits.max_wrong)
    policy = None
    if limits.regression_pct is not None:
        policy = RegressionPolicy(max_drop_pct=limits.regression_pct, window=limits.regression_window)
    return thresholds, policy


def gpus_of(check: NcclCheck, nodes: int, reported: int | None) -> int:
    """GPUs a run held: nodes x tasks x GPUs per task (local: the -g it ran with), else the ranks reported."""
    if check.mode == "local":
        return nodes * local_gpus(check)
    if check.gpus_per_task:
        return nodes * check.ntasks_per_node * check.gpus_per_task
    return reported or 0


def judge_step(check: NcclCheck, group: Group, step: StepRun, history: Callable[[str], list[float]],
               started: datetime | None = None) -> list[CheckResult]:
    """One result per judged node of a group from its srun's output, exit status and time."""
    started = started or utcnow()
    collective = collective_from_binary(check.binary)
    rank0 = RANK0.search(step.output)
    job_id = rank0.group("job") if rank0 else None
    run = parse_output(step.output, exit_code=step.rc, collective=collective)
    test = run.test(collective)
    gpu_seconds = gpus_of(check, len(group.nodes), test.nranks if test else None) * step.seconds
    share = gpu_seconds / len(group.judged)

    def result(node: str, ok: bool, message: str, details: list[str], *, error: bool = False,
               value: float | None = None) -> CheckResult:
        return CheckResult(check=check.name, kind="nccl", node=node, ok=ok, error=error, message=message,
                           value=value, details=details, started=started, duration=step.seconds, job_id=job_id,
                           gpu_seconds=0.0 if error else share)  # a step that never started held no GPUs

    where = _where(group, rank0, test)
    if step.rc is None or rank0 is None:
        # The step never started (allocation refused, GPUs busy, bad option, no output): not the nodes' fault.
        lines = [line.strip() for line in step.output.splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower() or "reconciler:" in line] or lines or ["no output"]
        message = f"not run: {errors[-1]}"
        if step.rc == 124:
            message = "timed out before starting" if check.mode == "local" else (
                f"srun got no allocation in {IMMEDIATE}s")
        return [result(n, False, message, lines[-5:], error=True) for n in group.judged]
    if step.rc == 124:
        run.errors.insert(0, f"timed out after {check.timeout}")
    thresholds, policy = thresholds_of(check)
    value = representative_busbw(test, thresholds.min_size) if test else None
    results = []
    for node in group.judged:
        past = history(node) if policy is not None else []
        verdict = evaluate(run, thresholds, {collective: past} if past else None, policy)
        message = _pass_message(collective, value, thresholds) if verdict.passed else verdict.reason or "failed"
        details = where + [f"{f.kind}: {f.message}" for f in verdict.findings]
        results.append(result(node, verdict.passed, message, details, value=value))
    return results


def _where(group: Group, rank0: re.Match[str] | None, test: NcclTest | None) -> list[str]:
    """Detail lines: the job, the node rank 0 ran on, the hosts nccl-tests listed, the partner."""
    lines = []
    if rank0:
        lines.append(f"job {rank0.group('job')} step {rank0.group('step')}: rank 0 on {rank0.group('host')}")
    hosts = sorted({d.host for d in test.devices}) if test else []
    if hosts:
        lines.append(f"nccl-tests ranks on {','.join(hosts)}")
    if len(group.nodes) > 1:
        lines.append(f"nodes {','.join(group.nodes)}")
    return lines


def _pass_message(collective: str, value: float | None, limits: Thresholds) -> str:
    """The one-line summary of a passing run."""
    if value is None:
        return f"{collective} passed"
    text = f"{collective} busbw {value:.1f} GB/s at >= {format_size(limits.min_size)}"
    return text + (f" (min {limits.min_busbw:g})" if limits.min_busbw is not None else "")


# ---------------------------------------------------------------- running


def run_waves(transport: Transport, launcher: NodeSpec, plan: NcclPlan, *, reservation: str | None = None,
              history: Callable[[str], list[float]] = lambda _: [], batch: int = 64,
              log: Callable[[str], None] = lambda _: None,
              should_stop: Callable[[], bool] = lambda: False) -> list[CheckResult]:
    """Run the plan's waves on the login node, BATCH sruns per SSH command; judge every srun (none after a stop)."""
    check = plan.check
    results: list[CheckResult] = []
    for wave in plan.waves:
        for start in range(0, len(wave), batch):
            if should_stop():
                return results
            chunk = wave[start:start + batch]
            lines = [launch_command(check, g.nodes, reservation=reservation if g.reserved else None) for g in chunk]
            for line in lines:
                log(f"nccl {check.name}: {line}")
            started = utcnow()
            clock = time.monotonic()
            limit = parse_duration(check.timeout) + IMMEDIATE + KILL_AFTER + 60
            outcome = transport.run(launcher, batch_script(lines), timeout=limit)
            if outcome.error is not None:
                for group in chunk:
                    results += [CheckResult(check=check.name, kind="nccl", node=n, ok=False, error=True,
                                            message=f"not run: {launcher.name}: {outcome.error}", started=started,
                                            duration=time.monotonic() - clock) for n in group.judged]
                continue
            steps = parse_batch(outcome.stdout + outcome.stderr, len(chunk))
            for group, step in zip(chunk, steps, strict=True):
                results += judge_step(check, group, step, history, started)
    return results


def run_local(transport: Transport, nodes: Sequence[NodeSpec], check: NcclCheck, *,
              history: Callable[[str], list[float]] = lambda _: [],
              log: Callable[[str], None] = lambda _: None) -> list[CheckResult]:
    """Local mode: every node runs `local_command` itself (all nodes at once, `forks` at a time); judge each."""
    line = local_command(check)
    log(f"nccl {check.name} (local) on {','.join(n.name for n in nodes)}: {line}")
    started = utcnow()
    clock = time.monotonic()
    outcomes = transport.run_many(list(nodes), batch_script([line]),
                                  timeout=parse_duration(check.timeout) + KILL_AFTER + 60)
    results: list[CheckResult] = []
    for spec in nodes:
        outcome = outcomes[spec.name]
        if outcome.error is not None:
            results.append(CheckResult(check=check.name, kind="nccl", node=spec.name, ok=False, error=True,
                                       message=f"not run: {spec.name}: {outcome.error}", started=started,
                                       duration=time.monotonic() - clock))
            continue
        step = parse_batch(outcome.stdout + outcome.stderr, 1)[0]
        results += judge_step(check, Group((spec.name,), (spec.name,)), step, history, started)
    return results
