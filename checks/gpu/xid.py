"""XID events from the kernel log: what each means, which are fatal, and which are new since the last check.

The probe prints the boot id and the `NVRM: Xid` lines of the current boot (`dmesg`, else the journal's kernel
messages with monotonic stamps). What was seen is remembered per node (`XidMemory`): a warning XID is
reported once, when it first appears; a fatal one fails the node for as long as it is in this boot's kernel log,
the GPU needing a reset or a reboot, unless an admin acknowledged it (`reconciler check --ack-xid NODE` after
`nvidia-smi -r`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from reconciler.checks.gpu.query import normalize_bus

LOG_LINES = 200
XID_TIMEOUT = 10

# Meaning and whether the GPU is unusable until reset/reboot (drain), after NVIDIA's XID catalogue
# (docs.nvidia.com/deploy/xid-errors). Unknown XIDs are warnings: reported, never drained on.
XIDS: dict[int, tuple[str, bool]] = {
    8: ("GPU stopped processing", False),
    13: ("graphics engine exception", False),
    31: ("GPU memory page fault", False),
    32: ("invalid or corrupted push buffer stream", False),
    38: ("driver firmware error", True),
    43: ("GPU stopped processing", False),
    44: ("graphics engine fault during context switch", True),
    45: ("preemptive cleanup after earlier errors", False),
    48: ("double bit ECC error", True),
    56: ("display engine error", False),
    57: ("error programming video memory interface", True),
    61: ("internal micro-controller breakpoint", True),
    62: ("internal micro-controller halt", True),
    63: ("row remapping or page retirement event", True),
    64: ("row remapping or page retirement failure", True),
    68: ("video decoder exception", False),
    69: ("graphics engine class error", False),
    74: ("NVLink error", True),
    79: ("fallen off the bus", True),
    92: ("high single-bit ECC error rate", False),
    94: ("contained ECC error", True),
    95: ("uncontained ECC error", True),
    109: ("context switch timeout", False),
    119: ("GSP RPC timeout", True),
    120: ("GSP error", True),
    121: ("C2C link corrected error", False),
    140: ("unrecovered ECC error", True),
    143: ("GPU initialization failure", True),
    154: ("GPU recovery action changed", True),
}

_LINE = re.compile(r"^(?:\[\s*(?P<ts>\d+\.\d+)\]\s*)?.*?NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F:.]+)\): "
                   r"(?P<xid>\d+),\s*(?P<text>.*?)\s*$")
_BOOT = re.compile(r"^boot (?P<id>[0-9a-fA-F-]{8,})\s*$")


def xid_command() -> str:
    """Shell text: `boot <id>`, then this boot's NVRM Xid lines with their monotonic stamps (last 200)."""
    return ("echo \"boot $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\"; "
            f"if k=$(timeout {XID_TIMEOUT} dmesg 2>/dev/null) || "
            f"k=$(timeout {XID_TIMEOUT} journalctl -k -b -q --no-pager -o short-monotonic 2>/dev/null); then "
            f"printf '%s\\n' \"$k\" | grep -F 'NVRM: Xid' | tail -n {LOG_LINES}; true; "
            "else echo 'kernel log: not readable (dmesg and journalctl failed)'; (exit 3); fi")


def meaning(xid: int) -> str:
    """What an XID means, in a few words."""
    return XIDS.get(xid, ("unknown XID", False))[0]


def fatal(xid: int) -> bool:
    """True when the XID leaves the GPU unusable until a reset or reboot."""
    return XIDS.get(xid, ("", False))[1]


@dataclass(frozen=True)
class XidEvent:
    """One XID line: seconds since boot (None when the log has no stamps), PCI address, number, driver text."""

    ts: float | None
    bus: str
    xid: int
    text: str
    order: int = 0

    @property
    def key(self) -> float:
        """Where the event stands in the boot's log: its stamp, else its position."""
        return self.ts if self.ts is not None else float(self.order)


@dataclass(frozen=True)
class KernelLog:
    """The probe's view of the kernel log: boot id, XID events in order, and lines that were not understood."""

    boot: str | None
    events: list[XidEvent]
    unreadable: str | None = None


def parse_xids(output: str) -> KernelLog:
    """The `boot <id>` line and the XID events of the probe's output."""
    boot = None
    events: list[XidEvent] = []
    unreadable = None
    for line in output.splitlines():
        if (found := _BOOT.match(line.strip())) is not None:
            boot = found.group("id").lower()
            continue
        if line.startswith("kernel log: not readable"):
            unreadable = line.strip()
            continue
        found = _LINE.match(line.strip())
        if found is None:
            continue
        ts = float(found.group("ts")) if found.group("ts") else None
        events.append(XidEvent(ts, normalize_bus(found.group("bus")), int(found.group("xid")), found.group("text"),
                               order=len(events)))
    return KernelLog(boot, events, unreadable)


@dataclass(frozen=True)
class XidMemory:
    """What one node's earlier checks saw: its boot, the last XID seen, the last acknowledged, GPU buses."""

    boot: str | None = None
    seen_until: float | None = None
    acked_until: float | None = None
    buses: dict[str, int] = field(default_factory=dict)

    def for_boot(self, boot: str | None) -> XidMemory:
        """This memory if it is of BOOT; after a reboot, only the bus map carries over."""
        if boot is None or boot == self.boot:
            return self
        return XidMemory(boot=boot, buses=dict(self.buses))


@dataclass(frozen=True)
class XidVerdict:
    """Per (GPU, XID): fatal ones still standing, new warnings, and the updated memory."""

    fatal: list[tuple[str, int, int]]      # (gpu label, xid, count)
    warnings: list[tuple[str, int, int]]   # new this check only
    memory: XidMemory


def gpu_label(bus: str, index_of: dict[str, int]) -> str:
    """The GPU's index for a bus address, or `pci <bus>` when no source knows it."""
    return str(index_of[bus]) if bus in index_of else f"pci {bus}"


def judge_events(log: KernelLog, memory: XidMemory, ignore: set[int], index_of: dict[str, int]) -> XidVerdict:
    """Fatal XIDs of this boot not acknowledged (each GPU and XID once) and warnings first seen now."""
    memory = memory.for_boot(log.boot)
    seen, acked = memory.seen_until, memory.acked_until
    fatal_counts: dict[tuple[str, int], int] = {}
    warn_counts: dict[tuple[str, int], int] = {}
    for event in log.events:
        if event.xid in ignore:
            continue
        label = gpu_label(event.bus, index_of)
        if fatal(event.xid):
            if acked is None or event.key > acked:
                fatal_counts[(label, event.xid)] = fatal_counts.get((label, event.xid), 0) + 1
        elif seen is None or event.key > seen:
            warn_counts[(label, event.xid)] = warn_counts.get((label, event.xid), 0) + 1
    last = max((e.key for e in log.events), default=None)
    updated = replace(memory, seen_until=last if last is not None else memory.seen_until)
    return XidVerdict([(g, x, n) for (g, x), n in fatal_counts.items()],
                      [(g, x, n) for (g, x), n in warn_counts.items()], updated)


def acknowledged(memory: XidMemory) -> XidMemory:
    """MEMORY with every XID seen so far acknowledged (after the GPUs were reset)."""
    return replace(memory, acked_until=memory.seen_until)
