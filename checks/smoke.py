"""The rollout's smoke job: a tiny Slurm job on exactly a wave's nodes, through a reservation of our own.

It exercises what a user's job hits on those nodes: the prolog and the epilog (a failing one makes Slurm drain the
node: "Prolog error"/"Epilog error"), the mounts from inside the job, and, where an image is given, a container
start through Pyxis. The reservation (maint, ignore_jobs, root only) keeps user jobs from taking the nodes for the
few seconds it lives and lets the job start beside running jobs without waiting behind the queue; it is deleted
whatever happens. Nodes that cannot take a one-CPU job now (drained, down, fully allocated) are skipped and named.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reconciler.checks.nccl.run import reservation_create_command, reservation_delete_command
from reconciler.checks.slurm_view import SlurmView, fetch_view
from reconciler.checks.smoke_settle import prolog_failures, settle, unsettled_nodes
from reconciler.common import hostlist
from reconciler.desired.inventory import NodeSpec
from reconciler.transport.base import Transport

JOB_NAME = "reconciler-smoke"
MARK = "reconciler-smoke"
KILL_AFTER = 10
_LINE = re.compile(rf"^{MARK} (OK|FAIL) (\S+)(?:: (.*))?$")
_RC = re.compile(rf"^{MARK}-rc (\w+) (\d+)$")
# The container step says this from inside the started container (Slurm sets SLURMD_NODENAME in every task). Its
# word, not srun's status, is the proof: srun 22.05 exits 0 when a SPANK plugin (Pyxis) fails every task's launch.
_STARTED = re.compile(rf"^{MARK}-container OK (\S+)$")


@dataclass
class SmokeSpec:
    """What to run: the nodes, the mount points to look at, an optional container image, limits."""

    nodes: list[str]
    mounts: list[str] = field(default_factory=list)
    container_image: str | None = None
    timeout: float = 600.0
    reservation: str = "reconciler-smoke"
    partition: str | None = None


@dataclass
class SmokeResult:
    """How the smoke job went: failing nodes with why, nodes Slurm drained meanwhile, nodes skipped."""

    ok: bool
    message: str
    failed: dict[str, str] = field(default_factory=dict)
    drained: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    output: str = ""


def step_script(mounts: Sequence[str]) -> str:
    """The job step's shell script: every mount point mounted and answering, then an OK line naming the node."""
    lines = ['h=$(hostname -s)']
    for mount in mounts:
        m = shlex.quote(mount)
        # The path is quoted everywhere, messages included: a mount point never becomes shell code.
        lines.append(f'mountpoint -q {m} || {{ echo "{MARK} FAIL $h: "{m}" is not mounted"; exit 1; }}')
        lines.append(f'timeout 10 ls {m} >/dev/null 2>&1 || {{ echo "{MARK} FAIL $h: "{m}" does not answer"; '
                     'exit 1; }')
    lines.append(f'echo "{MARK} OK $h"')
    return "; ".join(lines)


def srun_words(spec: SmokeSpec, nodes: Sequence[str], *, image: str | None = None) -> list[str]:
    """One srun of the smoke job on NODES (the plain step, or a container start when IMAGE is given)."""
    immediate = max(5, min(60, int(spec.timeout)))
    words = ["timeout", "-k", str(KILL_AFTER), str(int(spec.timeout)), "srun", f"--job-name={JOB_NAME}",
             f"--reservation={spec.reservation}", f"--nodes={len(nodes)}", f"--nodelist={hostlist.compress(nodes)}",
             "--ntasks-per-node=1", "--cpus-per-task=1", f"--immediate={immediate}",
             f"--time={max(1, math.ceil(spec.timeout / 60))}", "--kill-on-bad-exit=0"]
    if spec.partition:
        words.append(f"--partition={spec.partition}")
    if image:
        return words + [f"--container-image={image}", "sh", "-c", f'echo "{MARK}-container OK $SLURMD_NODENAME"']
    return words + ["sh", "-c", step_script(spec.mounts)]


def launch_script(spec: SmokeSpec, nodes: Sequence[str]) -> str:
    """What runs on the login node: the plain step, then the container start if any, each rc on its own line."""
    lines = [shlex.join(srun_words(spec, nodes)) + f" 2>&1; echo \"{MARK}-rc step $?\""]
    if spec.container_image:
        lines.append(shlex.join(srun_words(spec, nodes, image=spec.container_image))
                     + f" 2>&1; echo \"{MARK}-rc container $?\"")
    return "\n".join(lines) + "\n"


def parse_output(output: str) -> tuple[dict[str, str], set[str], dict[str, int]]:
    """Per-node FAIL reasons, nodes that said OK, and each srun's exit status, from the launch script's output."""
    failed: dict[str, str] = {}
    passed: set[str] = set()
    rcs: dict[str, int] = {}
    for raw in output.splitlines():
        line = raw.strip()
        if (rc := _RC.match(line)) is not None:
            rcs[rc.group(1)] = int(rc.group(2))
        elif (hit := _LINE.match(line)) is not None:
            if hit.group(1) == "OK":
                passed.add(hit.group(2))
            else:
                failed[hit.group(2)] = hit.group(3) or "failed"
    return failed, passed, rcs


def runnable(view: SlurmView, nodes: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The nodes that can take a one-CPU job now, and why each other one is skipped."""
    take: list[str] = []
    skipped: dict[str, str] = {}
    for name in nodes:
        fact = view.nodes.get(name)
        if fact is None:
            skipped[name] = "not a Slurm node"
        elif not fact.responding:
            skipped[name] = f"not responding ({fact.state})"
        elif fact.drained:
            skipped[name] = f"drained ({fact.reason or fact.state})"
        elif view.base_state(name) == "ALLOCATED":
            skipped[name] = "fully allocated by running jobs"
        else:
            take.append(name)
    return take, skipped


def _drains(before: SlurmView, after: SlurmView, nodes: Sequence[str]) -> dict[str, str]:
    """Nodes drained in AFTER that were not (or for another reason) in BEFORE."""
    out = {}
    for name in nodes:
        now, was = after.nodes.get(name), before.nodes.get(name)
        if now is not None and now.drained and not (was is not None and was.drained and was.reason == now.reason):
            out[name] = now.reason or now.state
    return out


def run_smoke(transport: Transport, launcher: NodeSpec, controller: NodeSpec, spec: SmokeSpec,
              should_stop: Callable[[], bool] = lambda: False) -> SmokeResult:
    """Reserve the nodes, run the smoke job on them, wait for Slurm to settle, delete the reservation; judge."""
    started = time.monotonic()
    before = fetch_view(transport, controller)
    if before.error:
        return SmokeResult(False, f"smoke job: Slurm does not answer: {before.error}", seconds=0.0)
    nodes, skipped = runnable(before, spec.nodes)
    note = f" (skipped {hostlist.compress(sorted(skipped))}: {next(iter(skipped.values()))})" if skipped else ""
    if not nodes:
        return SmokeResult(True, "smoke job: no node of the wave can take a job now" + note, skipped=skipped)
    transport.run(controller, reservation_delete_command(spec.reservation))  # a stale one from a killed run
    minutes = max(1, math.ceil(spec.timeout / 60)) + 1
    created = transport.run(controller, reservation_create_command(spec.reservation, nodes, minutes))
    if not created.ok:
        return SmokeResult(False, f"smoke job: reservation refused: {created.describe()}",
                           {n: "reservation refused" for n in nodes}, skipped=skipped,
                           seconds=time.monotonic() - started)
    try:
        ran = transport.run(launcher, launch_script(spec, nodes), timeout=spec.timeout * 2 + 2 * KILL_AFTER + 30)
        output = ran.stdout + ran.stderr
        failed, passed, rcs = parse_output(output)
        silent = set() if rcs.get("step") == 0 else {n for n in nodes if n not in passed and n not in failed}
        settled = settle(transport, controller, JOB_NAME, spec.reservation, silent | prolog_failures(output),
                         spec.timeout, should_stop)
    finally:
        transport.run(controller, reservation_delete_command(spec.reservation))
    after = settled.view
    drained = _drains(before, after, nodes)
    for node, reason in drained.items():
        failed[node] = f"drained by Slurm: {reason}"
    if after.error is not None:  # no word from Slurm after the job: its drains cannot be known, nothing passes
        failed.update({n: f"Slurm did not answer after the job: {after.error}" for n in nodes if n not in failed})
    for node, why in unsettled_nodes(settled.jobs, nodes).items():
        failed.setdefault(node, f"{why} after {spec.timeout:.0f} s")
    if ran.error is None and spec.container_image and "container" in rcs:
        for node, why in container_failures(output, spec.container_image, nodes).items():
            failed.setdefault(node, why)
    if ran.error is not None:
        failed.update({n: f"not run: {ran.error}" for n in nodes if n not in failed})
    elif rcs.get("step", 1) != 0 or any(rc != 0 for rc in rcs.values()):
        why = _last_error(output) or f"srun exited {rcs}"
        # A node Slurm drained (a failed prolog) aborts the whole step: the others' tasks are then Terminated or
        # Killed by srun, or never say a word before srun gives up on the step ("Job step aborted", then "Timed out
        # waiting for job step to complete", seen on a loaded testbed), not failed on their own. They are not blamed:
        # the wave fails by the drained node anyway, and a node that had its own fault fails the retry.
        collateral = aborted_tasks(output, nodes, passed | set(failed)) if drained else set()
        failed.update({n: why for n in nodes if n not in failed and n not in passed and n not in collateral})
        if not failed:  # every node said OK but srun failed anyway (a container start, the epilog): all of them
            failed = {n: why for n in nodes}
    seconds = time.monotonic() - started
    if not failed:
        return SmokeResult(True, f"smoke job passed on {hostlist.compress(nodes)}{note}", skipped=skipped,
                           seconds=seconds, output=output)
    first = sorted(failed)[0]
    return SmokeResult(False, f"smoke job failed on {hostlist.compress(sorted(failed))}: {failed[first]}{note}",
                       failed, drained, skipped, seconds, output)


def container_failures(output: str, image: str, nodes: Sequence[str]) -> dict[str, str]:
    """Nodes where the container step did not start IMAGE, each with the image and the error Pyxis/enroot gave."""
    tail = output.split(f"{MARK}-rc step", 1)[-1]  # the container srun's own output comes after the plain step's
    started = {hit.group(1) for line in tail.splitlines() if (hit := _STARTED.match(line.strip()))}
    errors = [line.strip() for line in tail.splitlines() if "[ERROR]" in line]
    out = {}
    for node in nodes:
        if node in started:
            continue
        mine = [e for e in errors if re.search(rf"\b{re.escape(node)}\b", e.split("[ERROR]", 1)[0])] or errors
        detail = ("[ERROR]" + mine[-1].split("[ERROR]", 1)[1]) if mine else _last_error(tail)
        out[node] = f"container image {image} did not start" + (f": {detail[:200]}" if detail else "")
    return out


_ABORTED = re.compile(r"srun: error: (\S+): tasks? [\d,-]+: (?:Terminated|Killed)$")


def aborted_tasks(output: str, nodes: Sequence[str], spoke: set[str]) -> set[str]:
    """Nodes whose task a step aborted for another node's sake ended: Terminated, Killed, or silent after the abort."""
    ended = {hit.group(1) for line in output.splitlines() if (hit := _ABORTED.match(line.strip()))}
    if "Job step aborted" in output:
        ended |= {n for n in nodes if n not in spoke}
    return ended


def _last_error(output: str) -> str:
    """The last srun/slurm error line of OUTPUT, shortened."""
    errors = [line.strip() for line in output.splitlines() if "error" in line.lower() and MARK not in line]
    return errors[-1][:200] if errors else ""
