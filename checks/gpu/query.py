"""nvidia-smi's `--query-gpu` CSV: the fields that matter, asked so that old and new drivers both answer.

Recent drivers renamed `clocks_throttle_reasons.*` to `clocks_event_reasons.*` (the old name still answers
on 580) and added `fabric.*`; an older driver refuses an unknown field with `Field "..." is not a valid field
to query.` and exit 2. So the probe asks the new list first and, only on that refusal, the old one, printing
which list answered (`# fields: new|old`) before the rows: the parser maps columns by that list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Both lists end with the same common columns; the first N columns are shared too.
COMMON = ("index", "name", "pci.bus_id", "serial", "uuid", "driver_version", "persistence_mode", "pstate",
          "temperature.gpu", "power.draw", "power.limit", "clocks.sm", "clocks.max.sm")
TAIL = ("ecc.mode.current", "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
        "retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure", "pcie.link.gen.current",
        "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max", "memory.total")
FIELDS: dict[str, tuple[str, ...]] = {
    "new": COMMON + ("clocks_event_reasons.active",) + TAIL + ("fabric.state", "fabric.status"),
    "old": COMMON + ("clocks_throttle_reasons.active",) + TAIL,
}
# The names the driver may refuse, and the name parsed values are kept under.
REASONS_FIELD = {"clocks_event_reasons.active": "reasons", "clocks_throttle_reasons.active": "reasons"}
QUERY_TIMEOUT = 30
MISSING = 127
UNSUPPORTED = ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]", "")

# clocks_event_reasons bits (NVML's nvmlClocksEventReason*); the hardware ones mean the GPU is held down.
REASON_BITS = {
    0x1: "gpu-idle", 0x2: "applications-clocks-setting", 0x4: "sw-power-cap", 0x8: "hw-slowdown",
    0x10: "sync-boost", 0x20: "sw-thermal-slowdown", 0x40: "hw-thermal-slowdown", 0x80: "hw-power-brake-slowdown",
    0x100: "display-clock-setting",
}
HW_SLOWDOWN = 0x8 | 0x40 | 0x80
IDLE = 0x1


def _query(fields: tuple[str, ...]) -> str:
    """One nvidia-smi query of FIELDS, CSV without header or units, under a timeout."""
    return f"timeout {QUERY_TIMEOUT} nvidia-smi --query-gpu={','.join(fields)} --format=csv,noheader,nounits"


def query_command() -> str:
    """Shell text: the new field list, the old one when the driver refuses a field; 127 without nvidia-smi."""
    new, old = _query(FIELDS["new"]), _query(FIELDS["old"])
    return (
        "if ! command -v nvidia-smi >/dev/null 2>&1; then echo 'nvidia-smi: command not found'; (exit 127); else "
        f"out=$({new} 2>&1); rc=$?; "
        "if [ $rc -ne 0 ] && printf '%s' \"$out\" | grep -q 'is not a valid field'; then "
        f"echo '# fields: old'; {old}; "
        "else echo '# fields: new'; printf '%s\\n' \"$out\"; (exit $rc); fi; fi"
    )


@dataclass(frozen=True)
class GpuRow:
    """One GPU as the query reports it; None where the driver or GPU has no value ([N/A], [Not Supported])."""

    index: int
    name: str
    bus_id: str
    driver: str
    serial: str | None = None
    uuid: str | None = None
    persistence: str | None = None
    pstate: str | None = None
    temperature: float | None = None
    power_draw: float | None = None
    power_limit: float | None = None
    sm_clock: float | None = None
    sm_clock_max: float | None = None
    reasons: int | None = None
    ecc_mode: str | None = None
    ecc_volatile: int | None = None
    ecc_aggregate: int | None = None
    retired_pending: str | None = None
    remap_pending: str | None = None
    remap_failure: str | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    memory_mib: int | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None

    @property
    def reason_names(self) -> list[str]:
        """The active clock-event reasons by name."""
        bits = self.reasons or 0
        return [name for bit, name in REASON_BITS.items() if bits & bit]

    @property
    def bus(self) -> str:
        """The bus id as `dddd:bb:dd` (domain, bus, device), lower case: what the kernel log names."""
        return normalize_bus(self.bus_id)


@dataclass(frozen=True)
class GpuQuery:
    """The rows of one query, the field list that answered, and lines that were not rows (errors)."""

    fields: str
    rows: list[GpuRow]
    other: list[str]


_ATTRS = {
    "index": "index", "name": "name", "pci.bus_id": "bus_id", "serial": "serial", "uuid": "uuid",
    "driver_version": "driver", "persistence_mode": "persistence", "pstate": "pstate",
    "temperature.gpu": "temperature", "power.draw": "power_draw", "power.limit": "power_limit",
    "clocks.sm": "sm_clock", "clocks.max.sm": "sm_clock_max", "ecc.mode.current": "ecc_mode",
    "ecc.errors.uncorrected.volatile.total": "ecc_volatile", "ecc.errors.uncorrected.aggregate.total": "ecc_aggregate",
    "retired_pages.pending": "retired_pending", "remapped_rows.pending": "remap_pending",
    "remapped_rows.failure": "remap_failure", "pcie.link.gen.current": "pcie_gen", "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.width.current": "pcie_width", "pcie.link.width.max": "pcie_width_max", "memory.total": "memory_mib",
    "fabric.state": "fabric_state", "fabric.status": "fabric_status", **REASONS_FIELD,
}
_INTS = {"ecc_volatile", "ecc_aggregate", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "memory_mib"}
_FLOATS = {"temperature", "power_draw", "power_limit", "sm_clock", "sm_clock_max"}
_FIELDS_LINE = re.compile(r"^# fields: (?P<which>new|old)\s*$")
_BUS = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.\d+)?$")


def normalize_bus(text: str) -> str:
    """`00000000:3B:00.0`, `0000:3b:00` or `3b:00` -> `0000:3b:00`; other text is returned lower-cased."""
    found = _BUS.match(text.strip())
    if not found:
        return text.strip().lower()
    domain = int(found.group("domain") or "0", 16)
    return f"{domain:04x}:{int(found.group('bus'), 16):02x}:{int(found.group('dev'), 16):02x}"


def _value(attr: str, text: str) -> object:
    """A CSV cell as its attribute's type; None for [N/A] and friends or what does not parse."""
    text = text.strip()
    if text in UNSUPPORTED:
        return None
    try:
        if attr in _INTS:
            return int(float(text))
        if attr in _FLOATS:
            return float(text)
        if attr == "reasons":
            return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None
    return text


def parse_query(output: str) -> GpuQuery:
    """Rows of the query's CSV after its `# fields:` line; without one, legacy `name, driver_version` lines."""
    fields: tuple[str, ...] | None = None
    which = "legacy"
    rows: list[GpuRow] = []
    other: list[str] = []
    for raw in output.splitlines():
        line = raw.strip()
        if not line:
            continue
        marker = _FIELDS_LINE.match(line)
        if marker:
            which = marker.group("which")
            fields = FIELDS[which]
            continue
        cells = [c.strip() for c in line.split(",")]
        if fields is None:
            if len(cells) >= 2 and not line.startswith(("nvidia-smi", "NVIDIA-SMI", "No devices", "Unable")):
                name, driver = line.rsplit(",", 1)
                rows.append(GpuRow(index=len(rows), name=name.strip(), bus_id="", driver=driver.strip()))
            else:
                other.append(line)
            continue
        if len(cells) != len(fields) or not cells[0].isdigit():
            other.append(line)
            continue
        values = {_ATTRS[f]: _value(_ATTRS[f], c) for f, c in zip(fields, cells, strict=True)}
        values["index"] = int(cells[0])
        values["name"] = values.get("name") or "?"
        values["bus_id"] = values.get("bus_id") or ""
        values["driver"] = values.get("driver") or "?"
        rows.append(GpuRow(**values))  # type: ignore[arg-type]
    return GpuQuery(which, rows, other)


MINORS_COMMAND = ("for f in /proc/driver/nvidia/gpus/*/information; do [ -r \"$f\" ] || continue; "
                  "m=$(sed -n 's/^Device Minor:[[:space:]]*//p' \"$f\"); d=${f%/information}; "
                  "echo \"${d##*/} $m\"; done")


def parse_minors(output: str) -> dict[str, int]:
    """`/proc/driver/nvidia/gpus/<bus>/information` Device Minor lines -> {normalized bus: minor}."""
    found: dict[str, int] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            found[normalize_bus(parts[0])] = int(parts[1])
    return found



# Corrected (single-bit) ECC counters, asked apart from the main query so that the recorded outputs of that query
# stay what they are (a field added there would change its column list). By UUID: no index to mix up.
ECC_FIELDS = ("uuid", "ecc.errors.corrected.volatile.total", "ecc.errors.corrected.aggregate.total")


def ecc_command() -> str:
    """Shell text: every GPU's corrected ECC counters, CSV without header or units."""
    return _query(ECC_FIELDS)


def parse_ecc(output: str) -> dict[str, tuple[int | None, int | None]]:
    """UUID -> (corrected ECC errors since the last reset, over the GPU's life); None where not supported."""
    found: dict[str, tuple[int | None, int | None]] = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(ECC_FIELDS) or not cells[0].startswith("GPU-"):
            continue

        def number(text: str) -> int | None:
            return int(text) if text.isdigit() else None

        found[cells[0]] = (number(cells[1]), number(cells[2]))
    return found
