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
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.checks.fleet import store as fleet_store
from reconciler.checks.fleet.readings import readings_from as fleet_readings
from reconciler.checks.gpu import judge as gpu_judge
from reconciler.checks.gpu import memory as gpu_memory
from reconciler.checks.gpu.dcgm import dcgm_command
from reconciler.checks.gpu.infiniband import ib_command
from reconciler.checks.gpu.nhc import nhc_command
from reconciler.checks.gpu.nvlink import nvlink_command
from reconciler.checks.gpu.pcie import PCIE_COMMAND
from reconciler.checks.gpu.query import (
    MINORS_COMMAND,
    QUERY_TIMEOUT,
    ecc_command,
    parse_minors,
    parse_query,
    query_command,
)
from reconciler.checks.gpu.xid import XidMemory, parse_xids, xid_command
from reconciler.checks.items import Item, no_output, tail
from reconciler.checks.results import CheckResult, utcnow
from reconciler.checks.slurm_view import SlurmView
from reconciler.common import hostlist
from reconciler.desired.inventory import NodeSpec, node_specs
from reconciler.drivers.node_state import GPU_REASON_PREFIX, REASON_PREFIX
from reconciler.facts.models import MountFact, ServiceFact
from reconciler.facts.parsers import parse_mountinfo
from reconciler.facts.sections import Section, script, split_sections
from reconciler.facts.services import parse_status, status_command
from reconciler.model import DesiredState, GpuExpectation, NhcCheck, NodeCheck, ServiceManager, parse_duration
from reconciler.transport.base import CommandResult, Transport

GPU_TIMEOUT = QUERY_TIMEOUT
WRITE_TIMEOUT = 10
MISSING = 127
TIMED_OUT = 124
FABRIC_MANAGER = "nvidia-fabricmanager"

@dataclass
class Probes:
    """What to look at on one node, the union over every check that applies to it."""

    gpu: bool = False
    xid: bool = False
    nvlink: bool = False
    ib: bool = False
    dcgm: tuple[int, int] | None = None  # (level, timeout s)
    nhc: NhcCheck | None = None
    mounts: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)

    def add(self, check: NodeCheck, images: list[str], retest: bool = False) -> None:
        """Add what CHECK needs (IMAGES: the image paths for this node; RETEST: the check drained it)."""
        gpus = check.gpus
        self.gpu = self.gpu or gpus is not None
        self.xid = self.xid or (gpus is not None and gpus.health and gpus.count > 0)
        self.nvlink = self.nvlink or (gpus is not None and (gpus.nvlinks is not None or gpus.nvlink_speed is not None))
        self.ib = self.ib or check.infiniband is not None
        if check.dcgm is not None and (check.dcgm.on_schedule or retest):
            level = max(check.dcgm.level, self.dcgm[0] if self.dcgm else 0)
            self.dcgm = (level, max(parse_duration(check.dcgm.timeout), self.dcgm[1] if self.dcgm else 0))
        self.nhc = self.nhc or check.nhc
        _extend(self.mounts, check.mounts)
        _extend(self.services, check.services)
        if gpus is not None and gpus.fabric_manager:
            _extend(self.services, [FABRIC_MANAGER])
        if check.images:
            _extend(self.images, images)


def _extend(target: list[str], values: Iterable[str]) -> None:
    """Append values not yet in target, keeping order."""
    for value in values:
        if value not in target:
            target.append(value)


# ---------------------------------------------------------------- the remote command


def gpu_command() -> str:
    """nvidia-smi's query of every GPU (old and new drivers); exit 127 with a message when nvidia-smi is absent."""
    return query_command()


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
        parts += [("gpu", gpu_command()), ("gpu.ecc", ecc_command()), ("gpu.pcie", PCIE_COMMAND)]
    if probes.xid:
        parts += [("gpu.minors", MINORS_COMMAND), ("gpu.xid", xid_command())]
    if probes.nvlink:
        parts.append(("gpu.nvlink", nvlink_command()))
    if probes.ib:
        parts.append(("ib", ib_command()))
    if probes.dcgm is not None:
        parts.append(("dcgm", dcgm_command(*probes.dcgm)))
    if probes.nhc is not None:
        parts.append(("nhc", nhc_command(probes.nhc.command, parse_duration(probes.nhc.timeout))))
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


_no_output = no_output
_tail = tail


def drained_by(check: NodeCheck, reason: str | None) -> bool:
    """True when a drain REASON was written by CHECK (its `check NAME:` prefix, or a GPU fault it probes)."""
    text = str(reason or "")
    return text.startswith(f"{REASON_PREFIX} check {check.name}:") or (
        check.gpus is not None and text.startswith(GPU_REASON_PREFIX))


def judge_gpus(expect: GpuExpectation, sec: Section | None) -> Item:
    """nvidia-smi's query lines against the expected count, model and driver (the `gpus` item)."""
    return gpu_judge.query_items(expect, sec)[0][0]


def judge_gpu_health(expect: GpuExpectation, sections: dict[str, Section], probes: Probes,
                     memory: XidMemory | None = None) -> list[Item]:
    """Every GPU item of one expectation: count/model/driver, each GPU's health, XIDs, NVLink."""
    items, query = gpu_judge.query_items(expect, sections.get("gpu"))
    if probes.xid and expect.health and expect.count > 0:
        memory = memory or XidMemory()
        minors = parse_minors(sections["gpu.minors"].output) if "gpu.minors" in sections else {}
        xids, _, _ = gpu_judge.xid_items(expect, sections.get("gpu.xid"), memory,
                                         gpu_judge.index_of(query, minors, memory))
        items = [i for i in xids if not i.ok] + items + [i for i in xids if i.ok]
    items += gpu_judge.nvlink_items(expect, sections.get("gpu.nvlink"), query)
    return items


def remembered(sections: dict[str, Section], memory: XidMemory) -> XidMemory:
    """MEMORY after this probe: its boot, the last XID line seen, and the GPUs' bus addresses."""
    buses = dict(memory.buses)
    if (sec := sections.get("gpu")) is not None and sec.rc == 0:
        buses.update({row.bus: row.index for row in parse_query(sec.output).rows if row.bus_id})
    if (sec := sections.get("gpu.minors")) is not None:
        buses.update(parse_minors(sec.output))
    updated = XidMemory(memory.boot, memory.seen_until, memory.acked_until, buses)
    sec = sections.get("gpu.xid")
    if sec is None or sec.rc != 0:
        return updated
    log = parse_xids(sec.output)
    updated = updated.for_boot(log.boot)
    last = max((e.key for e in log.events), default=None)
    return XidMemory(updated.boot, last if last is not None else updated.seen_until, updated.acked_until, buses)


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
                     munge: Item | None = None, memory: XidMemory | None = None) -> list[Item]:
    """Every item of one check on one node, from that node's probe output and the Slurm view."""
    items: list[Item] = []
    if check.gpus is not None:
        items += judge_gpu_health(check.gpus, sections, probes, memory)
        if check.gpus.fabric_manager and FABRIC_MANAGER not in check.services:
            items += judge_services([FABRIC_MANAGER], manager, sections.get("services"))
    if check.infiniband is not None:
        items += gpu_judge.ib_items(check.infiniband, sections.get("ib"))
    if check.dcgm is not None and probes.dcgm is not None:
        items.append(gpu_judge.dcgm_item(probes.dcgm[0], sections.get("dcgm")))
    if check.nhc is not None:
        items.append(gpu_judge.nhc_item(sections.get("nhc")))
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
    # GPU faults first: the drain reason is made of the first failure and names the GPU and fault
    failed = sorted((i for i in items if i.status == "fail"), key=lambda i: not i.message.startswith("gpu "))
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


def _keep_fleet(conn: sqlite3.Connection, state: DesiredState, sections: dict[str, dict[str, Section]],
                memories: dict[str, XidMemory], at: float) -> None:
    """Record what each node's GPU probe saw in the fleet history, and prune it to the retention."""
    readings, xids = [], []
    for node, found in sections.items():
        if "gpu" in found:
            mine, new = fleet_readings(node, found, at, memories.get(node))
            readings += mine
            xids += new
    fleet_store.ensure_schema(conn)
    fleet_store.save_rules(conn, state.checks.fleet)
    fleet_store.record(conn, readings, xids)
    fleet_store.prune(conn, at, float(parse_duration(state.checks.fleet.retention)))


def run_node_checks(state: DesiredState, transport: Transport, checks: list[NodeCheck], view: SlurmView,
                    only: set[str] | None = None, log: Callable[[str], None] = lambda _: None,
                    conn: sqlite3.Connection | None = None) -> list[CheckResult]:
    """Run node checks: one command per node covering every check on it; one result per check and node.

    CONN (the results database) keeps what the GPU checks saw on each node (XIDs already reported).
    """
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
            fact = view.nodes.get(node)
            retest = fact is not None and fact.drained and drained_by(check, fact.reason)
            probes[node].add(check, images[node], retest)
    memories = gpu_memory.load(conn, [n for n in per_node if probes[n].xid])
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
                                     images[node], view, munge.get(node), memories.get(node))
            results.append(node_result(check, node, items, started, duration))
    if conn is not None:  # every GPU's history, by UUID (checks/fleet), before the XID memory moves on
        _keep_fleet(conn, state, sections, memories, started.timestamp())
    gpu_memory.save(conn, {node: remembered(sections[node], memory) for node, memory in memories.items()
                           if node in sections})
    return results
