"""What one node check saw of each GPU, keyed by the GPU's UUID: a reading per GPU (its counters, flags,
temperature, throttling, links) and the XIDs new since the last check, each put on the GPU whose bus it names.

The probe's sections are the node check's own (`gpu`, `gpu.xid`, `gpu.nvlink`, `gpu.minors`): nothing more is
asked of the node. A GPU without a UUID in the query (a driver that cannot answer) has no history.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.checks.gpu.nvlink import parse_nvlink
from reconciler.checks.gpu.pcie import parse_replays
from reconciler.checks.gpu.query import HW_SLOWDOWN, MISSING, GpuRow, normalize_bus, parse_ecc, parse_query
from reconciler.checks.gpu.xid import KernelLog, XidMemory, parse_xids
from reconciler.facts.sections import Section

# Flag bits of a reading (one integer column in the store).
RETIRED_PENDING, REMAP_PENDING, REMAP_FAILURE, HW_SLOW, PCIE_DEGRADED = 1, 2, 4, 8, 16
FLAG_NAMES = {RETIRED_PENDING: "retired-page-pending", REMAP_PENDING: "row-remap-pending",
              REMAP_FAILURE: "row-remap-failure", HW_SLOW: "hw-slowdown", PCIE_DEGRADED: "pcie-degraded"}


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one check."""

    uuid: str
    serial: str | None
    name: str
    node: str
    index: int
    bus: str
    driver: str
    at: float
    boot: str | None = None
    temperature: float | None = None
    ecc_volatile: int | None = None  # uncorrectable ECC errors since the last reset
    ecc_aggregate: int | None = None  # uncorrectable ECC errors over the GPU's life
    sbe_volatile: int | None = None  # corrected (single-bit) ECC errors since the last reset
    sbe_aggregate: int | None = None  # corrected ECC errors over the GPU's life
    pcie_replays: int | None = None  # PCIe replays since the GPU's last reset
    flags: int = 0
    reasons: int | None = None  # clock event (throttle) reason bits
    nvlinks: int | None = None  # active NVLink links

    def flag_names(self) -> list[str]:
        """The flags set, by name."""
        return [name for bit, name in FLAG_NAMES.items() if self.flags & bit]


@dataclass(frozen=True)
class XidSeen:
    """XID CODE seen COUNT times on the GPU at BUS of NODE since the node's last check; UUID None when this query
    did not list that GPU (one fallen off the bus): the store finds it by the node and bus it was last seen at."""

    uuid: str | None
    node: str
    bus: str
    at: float
    code: int
    count: int


def _yes(value: str | None) -> bool:
    return (value or "").strip().lower() in ("yes", "1", "true")


def _flags(row: GpuRow) -> int:
    """The reading's flag bits from the query row."""
    flags = 0
    flags |= RETIRED_PENDING if _yes(row.retired_pending) else 0
    flags |= REMAP_PENDING if _yes(row.remap_pending) else 0
    flags |= REMAP_FAILURE if _yes(row.remap_failure) else 0
    flags |= HW_SLOW if row.reasons is not None and row.reasons & HW_SLOWDOWN else 0
    degraded = (row.pcie_gen is not None and row.pcie_gen_max is not None and row.pcie_gen < row.pcie_gen_max) or \
        (row.pcie_width is not None and row.pcie_width_max is not None and row.pcie_width < row.pcie_width_max)
    return flags | (PCIE_DEGRADED if degraded else 0)


def readings_from(node: str, sections: dict[str, Section], at: float,
                  memory: XidMemory | None = None) -> tuple[list[GpuReading], list[XidSeen]]:
    """Every GPU's reading and the XIDs new since MEMORY (the node's last check), from one probe's sections."""
    sec = sections.get("gpu")
    if sec is None or sec.rc == MISSING:
        return [], []
    query = parse_query(sec.output)
    links = parse_nvlink(sections["gpu.nvlink"].output) if "gpu.nvlink" in sections else {}
    ecc = sections.get("gpu.ecc")
    corrected = parse_ecc(ecc.output) if ecc is not None and ecc.rc == 0 else {}
    pcie = sections.get("gpu.pcie")
    replays = parse_replays(pcie.output) if pcie is not None and pcie.rc == 0 else {}
    xid_sec = sections.get("gpu.xid")
    log = parse_xids(xid_sec.output) if xid_sec is not None and xid_sec.rc in (0, None) else None
    boot = log.boot if log is not None else (memory.boot if memory else None)
    readings = []
    by_bus: dict[str, GpuRow] = {}
    for row in query.rows:
        if not row.uuid:
            continue
        bus = normalize_bus(row.bus_id)
        by_bus[bus] = row
        gpu_links = links.get(row.index)
        sbe_volatile, sbe_aggregate = corrected.get(row.uuid, (None, None))
        readings.append(GpuReading(
            uuid=row.uuid, serial=row.serial, name=row.name, node=node, index=row.index,
            bus=bus, driver=row.driver, at=at, boot=boot, temperature=row.temperature,
            ecc_volatile=row.ecc_volatile, ecc_aggregate=row.ecc_aggregate,
            sbe_volatile=sbe_volatile, sbe_aggregate=sbe_aggregate, pcie_replays=replays.get(bus),
            flags=_flags(row), reasons=row.reasons,
            nvlinks=gpu_links.active if gpu_links is not None else None))
    return readings, _new_xids(node, log, memory, by_bus, at)


def _new_xids(node: str, log: KernelLog | None, memory: XidMemory | None, by_bus: dict[str, GpuRow],
              at: float) -> list[XidSeen]:
    """The XIDs of LOG after what MEMORY saw (all of them after a reboot), counted per GPU and code."""
    if log is None:
        return []
    seen = (memory or XidMemory()).for_boot(log.boot)
    counts: dict[tuple[str, int], int] = {}
    for event in log.events:
        if seen.seen_until is not None and event.key <= seen.seen_until:
            continue
        bus = normalize_bus(event.bus)
        counts[(bus, event.xid)] = counts.get((bus, event.xid), 0) + 1
    return [XidSeen(by_bus[bus].uuid if bus in by_bus else None, node, bus, at, code, count)
            for (bus, code), count in sorted(counts.items())]
