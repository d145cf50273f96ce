"""Judges of the GPU sections: parsed probe output and the desired state's expectations in, `Item`s out.

A fault on one GPU is an item named `gpu <index> <kind>` whose message starts the same way
(`gpu 3 xid 79 (fallen off the bus)`, `gpu 1 row-remap failure`): the drain reason is `reconciler: ` + that
message, and the metric `reconciler_gpu_fault{node,gpu,kind}` is read back from it (`fault_of`).
"""

from __future__ import annotations

import re

from reconciler.checks.gpu.dcgm import DCGM_MISSING, parse_diag
from reconciler.checks.gpu.infiniband import parse_ports
from reconciler.checks.gpu.nhc import NHC_MISSING, nhc_failure
from reconciler.checks.gpu.nvlink import parse_nvlink
from reconciler.checks.gpu.query import HW_SLOWDOWN, IDLE, MISSING, QUERY_TIMEOUT, GpuQuery, GpuRow, parse_query
from reconciler.checks.gpu.xid import KernelLog, XidMemory, judge_events, meaning, parse_xids
from reconciler.checks.items import Item, no_output, tail
from reconciler.facts.sections import Section
from reconciler.model import GpuExpectation, IbExpectation

TIMED_OUT = 124
_FAULT = re.compile(r"^gpu (?:(?P<gpu>\d+|pci \S+) )?(?P<kind>[a-z][a-z-]*)\b")


def fault_of(message: str) -> tuple[str, str] | None:
    """(gpu, kind) of a GPU fault message (gpu '' for one of the node's GPUs as a whole), else None."""
    found = _FAULT.match(message)
    if found is None:
        return None
    return found.group("gpu") or "", found.group("kind")


def _fault(gpu: int | str | None, kind: str, detail: str) -> Item:
    """A failed item for one GPU's fault (or the node's GPUs as a whole when GPU is None)."""
    who = f"gpu {gpu} {kind}" if gpu is not None else f"gpu {kind}"
    return Item(who, "fail", f"{who} {detail}".rstrip())


def query_items(expect: GpuExpectation, sec: Section | None) -> tuple[list[Item], GpuQuery | None]:
    """Count, model and driver (the `gpus` item), then each GPU's health, from the query section."""
    missing = no_output("gpus", sec)
    if missing or sec is None:
        return [missing or Item("gpus", "error", "gpus: no output")], None
    if sec.rc == MISSING:
        if expect.count == 0:
            return [Item("gpus", "pass", "no GPUs expected (no nvidia-smi)")], None
        return [Item("gpus", "fail", f"gpus: nvidia-smi not found (expected {expect.count} GPUs)")], None
    if sec.rc == TIMED_OUT:
        return [Item("gpus", "fail", f"gpus: nvidia-smi timed out after {QUERY_TIMEOUT}s")], None
    query = parse_query(sec.output)
    if sec.rc != 0 and not query.rows:
        last = query.other[-1] if query.other else tail(sec)
        return [Item("gpus", "fail", f"gpus: nvidia-smi failed (exit {sec.rc})" + (f": {last}" if last else ""))], None
    items = [_count_item(expect, query, sec.rc or 0)]
    if expect.health or expect.max_temperature or expect.pcie or expect.ecc or expect.fabric_manager:
        for row in query.rows:
            items += row_items(expect, row)
    return items, query


def _count_item(expect: GpuExpectation, query: GpuQuery, rc: int) -> Item:
    """The `gpus` item: how many, which model, which driver."""
    gpus = query.rows
    problems = []
    if len(gpus) != expect.count:
        problems.append(f"found {len(gpus)}, expected {expect.count}")
        if rc != 0 and query.other:
            problems.append(f"nvidia-smi exit {rc}: {query.other[-1]}")
    if expect.model:
        wrong = [g for g in gpus if expect.model.lower() not in g.name.lower()]
        if wrong:
            more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            problems.append(f"GPU {wrong[0].index} is {wrong[0].name}, expected {expect.model}{more}")
    drivers = sorted({g.driver for g in gpus})
    if expect.driver and gpus and any(not d.startswith(expect.driver) for d in drivers):
        problems.append(f"driver {','.join(drivers)}, expected {expect.driver}")
    if problems:
        return Item("gpus", "fail", "gpus: " + "; ".join(problems))
    models = sorted({g.name for g in gpus})
    summary = f"{len(gpus)}x {'/'.join(models)}" if gpus else "0 GPUs"
    return Item("gpus", "pass", summary + (f" (driver {','.join(drivers)})" if drivers else ""))


def row_items(expect: GpuExpectation, row: GpuRow) -> list[Item]:
    """One GPU's faults against EXPECT (nothing when it is healthy)."""
    i = row.index
    items: list[Item] = []
    if expect.health:
        if row.ecc_volatile:
            items.append(_fault(i, "ecc", f"{row.ecc_volatile} uncorrected errors since the last reset"))
        if row.remap_failure == "Yes":
            items.append(_fault(i, "row-remap", "failure (no spare rows left)"))
        elif row.remap_pending == "Yes":
            items.append(_fault(i, "row-remap", "pending (reset the GPU)"))
        if row.retired_pending == "Yes":
            items.append(_fault(i, "retired-pages", "pending (reset the GPU)"))
        held = (row.reasons or 0) & HW_SLOWDOWN
        if held:
            names = [n for n in row.reason_names if n.startswith("hw-")]
            items.append(_fault(i, "clocks", "held down: " + ", ".join(names)))
    if expect.ecc and row.ecc_mode is not None and row.ecc_mode != "Enabled":
        items.append(_fault(i, "ecc-mode", f"{row.ecc_mode.lower()}, expected enabled"))
    if expect.max_temperature is not None and row.temperature is not None and row.temperature > expect.max_temperature:
        items.append(_fault(i, "temperature", f"{row.temperature:g} C, max {expect.max_temperature}"))
    if expect.pcie is not None:
        items += _pcie(expect, row)
    fabric_bad = row.fabric_state != "Completed" or row.fabric_status not in (None, "Success")
    if expect.fabric_manager and row.fabric_state is not None and fabric_bad:
        status = f", {row.fabric_status}" if row.fabric_status else ""
        items.append(_fault(i, "fabric", f"registration {row.fabric_state}{status}"))
    return items


def _pcie(expect: GpuExpectation, row: GpuRow) -> list[Item]:
    """The link trained below the expected width, or generation (an idle GPU may step its generation down)."""
    assert expect.pcie is not None
    want_gen, want_width = expect.pcie.gen, expect.pcie.width
    gen = row.pcie_gen_max if (row.reasons or 0) & IDLE else row.pcie_gen
    low_gen = want_gen is not None and gen is not None and gen < want_gen
    low_width = want_width is not None and row.pcie_width is not None and row.pcie_width < want_width
    if not (low_gen or low_width):
        return []
    expected = " ".join(p for p in (f"gen{want_gen}" if want_gen else "", f"x{want_width}" if want_width else "") if p)
    return [_fault(row.index, "pcie", f"gen{row.pcie_gen} x{row.pcie_width}, expected {expected}")]


def index_of(query: GpuQuery | None, minors: dict[str, int], memory: XidMemory) -> dict[str, int]:
    """Bus address -> GPU index: the kernel's device minors, then this query, then what earlier checks saw."""
    found = dict(memory.buses)
    if query is not None:
        found.update({row.bus: row.index for row in query.rows if row.bus_id})
    found.update(minors)
    return found


def xid_items(expect: GpuExpectation, sec: Section | None, memory: XidMemory,
              buses: dict[str, int]) -> tuple[list[Item], XidMemory, KernelLog | None]:
    """Fatal XIDs of this boot (fail) and warnings first seen now (pass, reported once)."""
    missing = no_output("gpu xids", sec)
    if missing or sec is None:
        return [missing or Item("gpu xids", "error", "gpu xids: no output")], memory, None
    log = parse_xids(sec.output)
    if log.unreadable or sec.rc not in (0, None):
        return [Item("gpu xids", "error", f"gpu xids: {log.unreadable or f'exit {sec.rc}'}")], memory, log
    verdict = judge_events(log, memory, set(expect.xid_ignore), buses)
    items = []
    for gpu, xid, count in verdict.fatal:
        times = f" x{count}" if count > 1 else ""
        items.append(_fault(gpu, "xid", f"{xid} ({meaning(xid)}){times}"))
    for gpu, xid, count in verdict.warnings:
        times = f" x{count}" if count > 1 else ""
        items.append(Item(f"gpu {gpu} xid", "pass", f"gpu {gpu} xid {xid} ({meaning(xid)}){times}: warning, new"))
    if not items:
        items.append(Item("gpu xids", "pass", f"no fatal XID this boot ({len(log.events)} XID line(s))"))
    return items, verdict.memory, log


def nvlink_items(expect: GpuExpectation, sec: Section | None, query: GpuQuery | None) -> list[Item]:
    """Each GPU must have EXPECT.nvlinks links up, each at least EXPECT.nvlink_speed GB/s."""
    if expect.nvlinks is None and expect.nvlink_speed is None:
        return []
    missing = no_output("gpu nvlink", sec)
    if missing or sec is None:
        return [missing or Item("gpu nvlink", "error", "gpu nvlink: no output")]
    if sec.rc not in (0, None):
        return [Item("gpu nvlink", "error", f"gpu nvlink: nvidia-smi nvlink failed (exit {sec.rc}): {tail(sec)}")]
    links = parse_nvlink(sec.output)
    indices = [row.index for row in query.rows] if query is not None and query.rows else sorted(links)
    items = []
    for index in indices:
        gpu = links.get(index)
        active = gpu.active if gpu else 0
        total = len(gpu.links) if gpu else 0
        if expect.nvlinks is not None and active < expect.nvlinks:
            items.append(_fault(index, "nvlink", f"{active} of {expect.nvlinks} links up"
                                + (f" ({total - active} inactive)" if total > active else "")))
        elif expect.nvlink_speed is not None and gpu is not None:
            slow = {n: s for n, s in gpu.links.items() if s is not None and s < expect.nvlink_speed}
            if slow:
                link, speed = min(slow.items(), key=lambda kv: kv[1])
                want = f"expected {expect.nvlink_speed:g}"
                items.append(_fault(index, "nvlink", f"link {link} at {speed:g} GB/s, {want}"))
    if not items:
        items.append(Item("gpu nvlink", "pass", f"nvlink: {len(indices)} GPU(s), links up"))
    return items


def ib_items(expect: IbExpectation, sec: Section | None) -> list[Item]:
    """The expected number of ports up at the expected rate (and link layer)."""
    missing = no_output("ib", sec)
    if missing or sec is None:
        return [missing or Item("ib", "error", "ib: no output")]
    ports = parse_ports(sec.output)
    if expect.devices:
        ports = [p for p in ports if p.device in expect.devices]
    if expect.link_layer:
        ports = [p for p in ports if p.link_layer == expect.link_layer]
    items = []
    for port in ports:
        if not port.up:
            items.append(Item(f"ib {port.name}", "fail", f"ib {port.name} {port.state} ({port.phys_state})"))
        elif expect.rate is not None and (port.rate is None or port.rate < expect.rate):
            items.append(Item(f"ib {port.name}", "fail",
                              f"ib {port.name} rate {port.rate_text or '?'}, expected {expect.rate:g} Gb/sec"))
    up = [p for p in ports if p.up and (expect.rate is None or (p.rate or 0) >= expect.rate)]
    if len(up) < expect.ports:
        items.insert(0, Item("ib", "fail", f"ib: {len(up)} of {expect.ports} ports up"
                                           + ("" if ports else " (no ports in /sys/class/infiniband)")))
    if not items:
        rates = sorted({p.rate_text for p in up})
        items.append(Item("ib", "pass", f"ib: {len(up)} port(s) up" + (f" ({', '.join(rates)})" if rates else "")))
    return items


def dcgm_item(level: int, sec: Section | None) -> Item:
    """DCGM's verdict: fail when a test failed, error when dcgmi is missing or gave no table."""
    name = f"dcgm diag -r {level}"
    missing = no_output(name, sec)
    if missing or sec is None:
        return missing or Item(name, "error", f"{name}: no output")
    if sec.rc == DCGM_MISSING:
        return Item(name, "error", f"{name}: dcgmi not installed")
    if sec.rc == TIMED_OUT:
        return Item(name, "fail", f"gpu dcgm level {level} timed out")
    tests = parse_diag(sec.output)
    failed = [t for t in tests if t.result == "Fail"]
    if failed:
        what = "; ".join(f"{t.name}" + (f" {t.detail}" if t.detail else "") for t in failed[:3])
        return Item(name, "fail", f"gpu dcgm level {level} failed: {what}")
    if not tests:
        return Item(name, "error", f"{name}: no results (exit {sec.rc}): {tail(sec)}")
    warned = [t.name for t in tests if t.result == "Warn"]
    passed = sum(t.result == "Pass" for t in tests)
    return Item(name, "pass", f"dcgm level {level}: {passed} passed" + (f", warnings: {', '.join(warned)}"
                                                                        if warned else ""))


def nhc_item(sec: Section | None) -> Item:
    """NHC's verdict: its exit status, and the failed check from its last ERROR line."""
    missing = no_output("nhc", sec)
    if missing or sec is None:
        return missing or Item("nhc", "error", "nhc: no output")
    if sec.rc == NHC_MISSING:
        return Item("nhc", "error", "nhc: not installed")
    if sec.rc == TIMED_OUT:
        return Item("nhc", "fail", "nhc: timed out")
    failure = nhc_failure(sec.output)
    if sec.rc != 0:
        return Item("nhc", "fail", f"nhc: {failure or f'exit {sec.rc}: {tail(sec)}'}")
    return Item("nhc", "pass", "nhc: passed")
