"""NVLink: `nvidia-smi nvlink -s`, each GPU's links with their speed or `<inactive>`."""

from __future__ import annotations

import re
from dataclasses import dataclass

NVLINK_TIMEOUT = 20
_GPU = re.compile(r"^GPU (?P<index>\d+):")
_LINK = re.compile(r"^Link (?P<link>\d+): (?:(?P<speed>[\d.]+) GB/s|(?P<inactive><inactive>)|(?P<other>.*))$")


def nvlink_command() -> str:
    """Shell text: every GPU's NVLink status (an empty output on GPUs without NVLink)."""
    return f"timeout {NVLINK_TIMEOUT} nvidia-smi nvlink -s"


@dataclass(frozen=True)
class GpuLinks:
    """One GPU's links: link number -> GB/s, None when inactive."""

    index: int
    links: dict[int, float | None]

    @property
    def active(self) -> int:
        """Links up."""
        return sum(speed is not None for speed in self.links.values())


def parse_nvlink(output: str) -> dict[int, GpuLinks]:
    """GPU index -> its links, from `nvidia-smi nvlink -s`."""
    found: dict[int, GpuLinks] = {}
    current: GpuLinks | None = None
    for raw in output.splitlines():
        line = raw.strip()
        if (gpu := _GPU.match(line)) is not None:
            current = GpuLinks(int(gpu.group("index")), {})
            found[current.index] = current
        elif current is not None and (link := _LINK.match(line)) is not None:
            speed = link.group("speed")
            current.links[int(link.group("link"))] = float(speed) if speed else None
    return found
