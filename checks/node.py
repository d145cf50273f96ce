"""NHC-style node checks over SSH: GPUs, driver, mounts, services, enroot images, the Slurm state, munge.

Every check that applies to a node is probed by ONE command on that node (a script of sections, see
`checks.sections`); the Slurm state comes from the controller's `scontrol show node -o` (`SlurmView`).
The munge check crosses nodes: a credential made on the controller is decoded on each node and one made on
each node is decoded on the controller, the reconciler carrying them over SSH (three round trips in all).
The judging functions are pure: command output in, `Item` out.
"""

from __future__ import annotations

import posixpath
import shlex
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from reconciler import hostlist
from reconciler.backend.base import CommandResult, Transport
from reconciler.checks.results import CheckResult, utcnow
from reconciler.checks.sections import Section, script, split_sections
from reconciler.checks.slurm_view import SlurmView
from reconciler.facts.models import MountFact, ServiceFact
from reconciler.facts.parsers import parse_mountinfo
from reconciler.inventory import NodeSpec, node_specs
from reconciler.model import DesiredState, GpuExpectation, NodeCheck, ServiceManager
from reconciler.services import parse_status, status_command

GPU_QUERY = "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader"
GPU_TIMEOUT = 30
WRITE_TIMEOUT = 10
MISSING = 127
TIMED_OUT = 124

ItemStatus = Literal["pass", "fail", "error"]


@dataclass(frozen=True)
class Item:
    """One thing checked on a node: pass, fail (the node's fault) or error (could not tell)."""

    name: str
    status: ItemStatus
    message: str

    @property
    def ok(self) -> bool:
        """True when the item passed."""
        return self.status == "pass"


@dataclass
class Probes:
    """What to look at on one node, the union over every check that applies to it."""

    gpu: bool = False
    mounts: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)

    def add(self, check: NodeCheck, images: list[str]) -> None:
        """Add what CHECK needs (IMAGES: the image paths for this node)."""
        self.gpu = self.gpu or check.gpus is not None
        _extend(self.mounts, check.mounts)
        _extend(self.services, check.services)
        if check.images:
            _extend(self.images, images)


def _extend(target: list[str], values: Iterable[str]) -> None:
    """Append values not yet in target, keeping order."""
    for value in values:
        if value not in target:
            target.append(value)


# ---------------------------------------------------------------- the remote command


def gpu_command() -> str:
    """nvidia-smi's GPU names and driver versions; exit 127 with a message when nvidia-smi is absent."""
    return (f"if command -v nvidia-smi >/dev/null 2>&1; then timeout {GPU_TIMEOUT} {GPU_QUERY}; "
            f"else echo 'nvidia-smi: command not found'; (exit {MISSING}); fi")


def write_command(path: str) -> str:
    """Create and remove a temporary file in PATH, under a timeout (a hung mount must not hang us)."""
    probe = 'f=$(mktemp -p "$1" .reconciler-check.XXXXXX) && rm -f -- "$f"'
    return f"timeout {WRITE_TIMEOUT} sh -c {shlex.quote(probe)} sh {shlex.quote(path)}"


def image_command(path: str) -> str:
    """The size of an image file (following links)."""
    return f"stat -L -c %s {shlex.quote(path)}"


def probe_command(probes: Probes, manager: ServiceManager) -> str:
    """The one script that probes everything in PROBES on a node."""
    parts: list[tuple[str, str]] = [("hostname", "hostname")]
    if probes.gpu:
        parts.append(("gpu", gpu_command()))
    if probes.mounts:
        parts.append(("mountinfo", "cat /proc/self/mountinfo"))
        parts += [(f"write.{i}", write_command(path)) for i, path in enumerate(probes.mounts)]
    if probes.services:
        parts.append(("services", status_command(manager, probes.services)))
    parts += [(f"image.{i}", image_command(path)) for i, path in enumerate(probes.images)]
    return script(parts)


MUNGE_ENCODE = "munge -n"
# stdin: a credential made on the reference node. Prints the verdict of decoding it here, then a new credential.
MUNGE_CROSS = ('if err=$(unmunge 2>&1 >/dev/null); then echo "decode ok"; '
               'else echo "decode failed: $(printf %s "$err" | tail -n 1)"; fi; munge -n')
# stdin: one credential a line. Prints one verdict a line, in the same order.
MUNGE_DECODE_ALL = ('while IFS= read -r c; do if err=$(printf "%s\\n" "$c" | unmunge 2>&1 >/dev/null); '
                    'then echo "decode ok"; else echo "decode failed: $(printf %s "$err" | tail -n 1)"; fi; done')


# ---------------------------------------------------------------- judging (pure)


def _no_output(what: str, sec: Section | None) -> Item | None:
    """An error item when a probe's section is missing or cut off."""
    if sec is None or sec.rc is None:
        return Item(what, "error", f"{what}: no complete output from the probe")
    return None


def _tail(sec: Section) -> str:
    """The last output line of a section, or ''."""
    return sec.lines[-1] if sec.lines else ""


def judge_gpus(expect: GpuExpectation, sec: Section | None) -> Item:
    """nvidia-smi's `name, driver_version` lines against the expected count, model and driver."""
    missing = _no_output("gpus", sec)
    if missing or sec is None:
        return missing or Item("gpus", "error", "gpus: no output")
    if sec.rc == MISSING:
        if expect.count == 0:
            return Item("gpus", "pass", "no GPUs expected (no nvidia-smi)")
        return Item("gpus", "fail", f"gpus: nvidia-smi not found (expected {expect.count} GPUs)")
    if sec.rc == TIMED_OUT:
        return Item("gpus", "fail", f"gpus: nvidia-smi timed out after {GPU_TIMEOUT}s")
    if sec.rc != 0:
        tail = _tail(sec)
        return Item("gpus", "fail", f"gpus: nvidia-smi failed (exit {sec.rc})" + (f": {tail}" if tail else ""))
    gpus = [tuple(part.strip() for part in line.rsplit(",", 1)) for line in sec.lines]
    problems = []
    if len(gpus) != expect.count:
        problems.append(f"found {len(gpus)}, expected {expect.count}")
    if expect.model:
        wrong = [(i, g[0]) for i, g in enumerate(gpus) if expect.model.lower() not in g[0].lower()]
        if wrong:
            index, name = wrong[0]
            more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            problems.append(f"GPU {index} is {name}, expected {expect.model}{more}")
    drivers = sorted({g[1] for g in gpus if len(g) > 1})
    if expect.driver and gpus and any(not d.startswith(expect.driver) for d in drivers):
        problems.append(f"driver {','.join(drivers)}, expected {expect.driver}")
    if problems:
        return Item("gpus", "fail", "gpus: " + "; ".join(problems))
    models = sorted({g[0] for g in gpus})
    summary = f"{len(gpus)}x {'/'.join(models)}" if gpus else "0 GPUs"
    return Item("gpus", "pass", summary + (f" (driver {','.join(drivers)})" if drivers else ""))


def find_mount(mounts: list[MountFact], path: str) -> MountFact | None:
    """The mount whose mountpoint is PATH (the last one, as the kernel shows it on top)."""
    wanted = posixpath.normpath(path)
    found = [m for m in mounts if posixpath.normpath(m.mountpoint) == wanted]
    return found[-1] if found else None


def judge_mount(path: str, mountinfo: Section | None, write: Section | None) -> Item:
    """PATH must be a mount point (in /proc/self/mountinfo) and take a new file."""
    name = f"mount {path}"
    missing = _no_output(name, mountinfo)
    if missing or mountinfo is None:
        return missing or Item(name, "error", f"{name}: no output")
    mount = find_mount(parse_mountinfo(mountinfo.output), path)
    if mount is None:
        return Item(name, "fail", f"{name}: not mounted")
    missing = _no_output(f"{name} write test", write)
    if missing or write is None:
        return missing or Item(name, "error", f"{name}: no output")
    if write.rc == TIMED_OUT:
        return Item(name, "fail", f"{name}: write test timed out after {WRITE_TIMEOUT}s (hung mount?)")
    if write.rc != 0:
        reason = _tail(write).rsplit(": ", 1)[-1] or f"exit {write.rc}"
        return Item(name, "fail", f"{name}: not writable: {reason}")
    return Item(name, "pass", f"{path} writable ({mount.fstype} {mount.source})")


def judge_services(services: list[str], manager: ServiceManager, sec: Section | None) -> list[Item]:
    """Each service must run, by its service manager's word."""
    missing = _no_output("services", sec)
    if missing or sec is None:
        return [missing or Item("services", "error", "services: no output")]
    facts: dict[str, ServiceFact] = parse_status(manager, services, sec.output)
    items = []
    for name in services:
        fact = facts[name]
        if fact.running:
            items.append(Item(f"service {name}", "pass", f"{name} running"))
        else:
            detail = f" ({fact.detail})" if fact.detail and fact.detail != "not found" else ""
            state = "not found" if fact.detail == "not found" else "not running"
            items.append(Item(f"service {name}", "fail", f"service {name}: {state}{detail}"))
    return items


def judge_image(path: str, sec: Section | None) -> Item:
    """An enroot image file must exist and not be empty."""
    name = f"image {path}"
    missing = _no_output(name, sec)
    if missing or sec is None:
        return missing or Item(name, "error", f"{name}: no output")
    if sec.rc != 0:
        reason = _tail(sec).rsplit(": ", 1)[-1]
        return Item(name, "fail", f"{name}: missing" + (f" ({reason})" if reason else ""))
    size = int(sec.lines[0]) if sec.lines and sec.lines[0].isdigit() else 0
    if size == 0:
        return Item(name, "fail", f"{name}: empty file")
    return Item(name, "pass", f"{posixpath.basename(path)} present ({size} bytes)")


def judge_slurm_state(node: str, accepted: list[str], view: SlurmView) -> Item:
    """The node's base Slurm state (IDLE, MIXED, ...) must be one of ACCEPTED and slurmd must respond."""
    if view.error:
        return Item("slurm state", "error", f"slurm state: unknown ({view.error})")
    fact = view.nodes.get(node)
    if fact is None:
        return Item("slurm state", "fail", "slurm state: node not known to Slurm")
    base = view.base_state(node) or ""
    wanted = [s.upper() for s in accepted]
    if base not in wanted:
        return Item("slurm state", "fail", f"slurm state {fact.state}, want {'|'.join(wanted)}")
    if not fact.responding:
        return Item("slurm state", "fail", f"slurm state {fact.state}: slurmd not responding")
    return Item("slurm state", "pass", f"slurm {fact.state}")


def _verdict(text: str | None) -> str | None:
    """None when a `decode ok` line says the credential decoded, else why not."""
    if text is None:
        return "no answer"
    line = text.strip()
    return None if line == "decode ok" else (line.removeprefix("decode failed: ") or "no answer")


def judge_munge(node: str, reference: str, here: str | None, there: str | None) -> Item:
    """The reference's credential decoded HERE (on node) and the node's decoded THERE (on the reference)."""
    problems = []
    if (why := _verdict(here)) is not None:
        problems.append(f"credential from {reference} not decoded on {node} ({why})")
    if (why := _verdict(there)) is not None:
        problems.append(f"credential from {node} not decoded on {reference} ({why})")
    if problems:
        return Item("munge", "fail", "munge: " + "; ".join(problems))
    return Item("munge", "pass", f"munge credentials cross {node} <-> {reference}")


def judge_node_check(check: NodeCheck, node: str, sections: dict[str, Section], probes: Probes,
                     manager: ServiceManager, images: list[str], view: SlurmView,
                     munge: Item | None = None) -> list[Item]:
    """Every item of one check on one node, from that node's probe output and the Slurm view."""
    items: list[Item] = []
    if check.gpus is not None:
        items.append(judge_gpus(check.gpus, sections.get("gpu")))
    for path in check.mounts:
        index = probes.mounts.index(path)
        items.append(judge_mount(path, sections.get("mountinfo"), sections.get(f"write.{index}")))
    if check.services:
        items += judge_services(check.services, manager, sections.get("services"))
    if check.images:
        for path in images:
            items.append(judge_image(path, sections.get(f"image.{probes.images.index(path)}")))
    if check.slurm_state:
        items.append(judge_slurm_state(node, check.slurm_state, view))
    if check.munge:
        items.append(munge or Item("munge", "error", "munge: not probed"))
    return items


def node_result(check: NodeCheck, node: str, items: list[Item], started: datetime | None = None,
                duration: float = 0.0) -> CheckResult:
    """Fold a check's items into one result: fail if any item failed, error if any could not tell."""
    failed = [i for i in items if i.status == "fail"]
    errors = [i for i in items if i.status == "error"]
    if failed:
        message = "; ".join(i.message for i in failed + errors)
    elif errors:
        message = "; ".join(i.message for i in errors)
    else:
        message = ", ".join(i.message for i in items) or "nothing to check"
    return CheckResult(check=check.name, kind="node", node=node, ok=not failed and not errors,
                       error=not failed and bool(errors), message=message,
                       details=[f"{i.status}: {i.message}" for i in items], duration=duration,
                       started=started or utcnow())


# ---------------------------------------------------------------- running


def images_for(state: DesiredState, node: str) -> list[str]:
    """Image paths a node should see: those under a mount it has, or imported on it."""
    mountpoints = [m.mountpoint for m in state.storage.mounts if node in hostlist.expand_set(m.nodes)]
    found = []
    for image in state.images:
        shared = any(image.path == mp or image.path.startswith(mp.rstrip("/") + "/") for mp in mountpoints)
        if shared or image.import_on == node:
            found.append(image.path)
    return found


def targets(check: NodeCheck, specs: dict[str, NodeSpec], only: set[str] | None) -> list[str]:
    """The inventory nodes a check runs on, limited to ONLY when given."""
    return [n for n in hostlist.expand(check.nodes) if n in specs and (only is None or n in only)]


def _credential(output: str) -> str | None:
    """The `MUNGE:...:` line of a command's output."""
    found = [line.strip() for line in output.splitlines() if line.startswith("MUNGE:")]
    return found[-1] if found else None


def munge_cross(transport: Transport, specs: dict[str, NodeSpec], nodes: list[str], reference: str) -> dict[str, Item]:
    """`munge -n | unmunge` across nodes: each node against the reference (the controller), both ways.

    The reference itself passes when a node decodes its credential (alone, when it decodes its own).
    """
    made = transport.run(specs[reference], MUNGE_ENCODE)
    cred = _credential(made.stdout) if made.ok else None
    if cred is None:
        why = f"munge: no credential from {reference}: {made.describe()}"
        return {n: Item("munge", "fail" if n == reference else "error", why) for n in nodes}
    others = [n for n in nodes if n != reference]
    crossed = transport.run_many([specs[n] for n in others], MUNGE_CROSS, stdin=cred + "\n") if others else {}
    here: dict[str, str | None] = {n: next(iter(r.stdout.splitlines()), None) for n, r in crossed.items()
                                   if r.error is None}
    theirs = {n: _credential(r.stdout) for n, r in crossed.items() if r.error is None}
    asked = [n for n in others if theirs.get(n)] or ([reference] if reference in nodes else [])
    creds = [theirs[n] if n != reference else cred for n in asked]
    back = transport.run(specs[reference], MUNGE_DECODE_ALL, stdin="".join(f"{c}\n" for c in creds)) if asked else None
    verdicts = back.stdout.splitlines() if back is not None and back.ok else []
    there = {n: verdicts[i] if i < len(verdicts) else None for i, n in enumerate(asked)}
    items = {}
    for node in others:
        result = crossed[node]
        if result.error is not None:
            items[node] = Item("munge", "error", f"munge: unreachable: {result.error}")
        else:
            items[node] = judge_munge(node, reference, here.get(node), there.get(node) if theirs.get(node)
                                      else "decode failed: no credential made on the node")
    if reference in nodes:
        decoded = [n for n in others if _verdict(here.get(n)) is None]
        if decoded or (not others and _verdict(there.get(reference)) is None):
            items[reference] = Item("munge", "pass", f"munge credential of {reference} decoded on "
                                                     f"{hostlist.compress(decoded or [reference])}")
        else:
            items[reference] = Item("munge", "fail", f"munge: credential from {reference} decoded nowhere")
    return items


def run_node_checks(state: DesiredState, transport: Transport, checks: list[NodeCheck], view: SlurmView,
                    only: set[str] | None = None, log: Callable[[str], None] = lambda _: None) -> list[CheckResult]:
    """Run node checks: one command per node covering every check on it; one result per check and node."""
    specs = node_specs(state)
    per_node: dict[str, list[NodeCheck]] = {}
    for check in checks:
        for node in targets(check, specs, only):
            per_node.setdefault(node, []).append(check)
    probes: dict[str, Probes] = {}
    images = {node: images_for(state, node) for node in per_node}
    for node, node_checks in per_node.items():
        probes[node] = Probes()
        for check in node_checks:
            probes[node].add(check, images[node])
    started = utcnow()
    clock = time.monotonic()
    log(f"node checks: {len(checks)} check(s) on {len(per_node)} node(s)")
    outcomes: dict[str, CommandResult] = transport.run_many(
        [specs[n] for n in per_node],
        lambda spec: probe_command(probes[spec.name], spec.service_manager),
    )
    sections = {node: split_sections(o.stdout + o.stderr) for node, o in outcomes.items() if o.error is None}
    munged = [n for n, node_checks in per_node.items() if any(c.munge for c in node_checks)]
    munge = munge_cross(transport, specs, munged, state.cluster.controller_names[0]) if munged else {}
    results = []
    for check in checks:  # in the order of the desired state, then of the check's nodes
        for node in targets(check, specs, only):
            outcome = outcomes.get(node)
            duration = outcome.duration if outcome is not None else time.monotonic() - clock
            if outcome is None or outcome.error is not None:
                why = outcome.error if outcome is not None else "no result"
                results.append(CheckResult(check=check.name, kind="node", node=node, ok=False, error=True,
                                           message=f"unreachable: {why}", started=started, duration=duration))
                continue
            items = judge_node_check(check, node, sections[node], probes[node], specs[node].service_manager,
                                     images[node], view, munge.get(node))
            results.append(node_result(check, node, items, started, duration))
    return results
