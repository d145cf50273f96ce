"""InfiniBand/RoCE ports from `/sys/class/infiniband/<device>/ports/<port>/{state,phys_state,rate,link_layer}`."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

SYSFS = "/sys/class/infiniband"


def ib_command(root: str = SYSFS) -> str:
    """Shell text: one `device/port|state|phys_state|rate|link_layer` line per port under ROOT."""
    return (f"for p in {shlex.quote(root)}/*/ports/*; do [ -d \"$p\" ] || continue; d=${{p%/ports/*}}; "
            "printf '%s|%s|%s|%s|%s\\n' \"${d##*/}/${p##*/}\" \"$(cat \"$p/state\" 2>/dev/null)\" "
            "\"$(cat \"$p/phys_state\" 2>/dev/null)\" \"$(cat \"$p/rate\" 2>/dev/null)\" "
            "\"$(cat \"$p/link_layer\" 2>/dev/null)\"; done")


_RATE = re.compile(r"^(?P<gbps>[\d.]+)\s*Gb/sec")


@dataclass(frozen=True)
class IbPort:
    """One port: `mlx5_0/1`, its logical state (ACTIVE), physical state (LinkUp), rate in Gb/s, link layer."""

    name: str
    state: str
    phys_state: str
    rate: float | None
    rate_text: str
    link_layer: str

    @property
    def device(self) -> str:
        """The HCA, e.g. mlx5_0."""
        return self.name.split("/", 1)[0]

    @property
    def up(self) -> bool:
        """ACTIVE and LinkUp."""
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


def _word(text: str) -> str:
    """`4: ACTIVE` -> ACTIVE, `5: LinkUp` -> LinkUp."""
    return text.split(":", 1)[-1].strip()


def parse_ports(output: str) -> list[IbPort]:
    """The probe's `name|state|phys_state|rate|link_layer` lines."""
    ports = []
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5 or "/" not in parts[0]:
            continue
        rate = _RATE.match(parts[3].strip())
        ports.append(IbPort(parts[0], _word(parts[1]), _word(parts[2]), float(rate.group("gbps")) if rate else None,
                            parts[3].strip(), parts[4].strip()))
    return ports
