"""PCIe replay counters: how often each GPU's link had to resend a packet since the GPU was last reset.

`nvidia-smi --query-gpu` has no field for them and `-q -d` has no PCIe display (a real H200's driver 580 answers
`-d PCIE` with "Failed to parse --display/-d flags", exit 2: tests/fixtures/gpu/h200-fleet-2026-11-29); the full
`nvidia-smi -q` prints them per GPU under its bus address ("Replays Since Reset", "Replay Number Rollovers"), as
in the recorded H200 outputs
(tests/fixtures/gpu/h200-x1-2026-11-25/smi-q.txt, h200-x4-2026-11-26/smi-q.txt). A link that keeps replaying is
marginal (a riser, a slot, a cable of a PCIe switch) long before it trains down.
"""

from __future__ import annotations

import re

from reconciler.checks.gpu.query import QUERY_TIMEOUT, normalize_bus

# Only the lines the parser reads travel back (the whole report is ~250 lines a GPU); the status is nvidia-smi's.
PCIE_COMMAND = (f"out=$(timeout {QUERY_TIMEOUT} nvidia-smi -q 2>&1); rc=$?; "
                "printf '%s\\n' \"$out\" | grep -E '^GPU |Replays Since Reset|Replay Number Rollovers|rror'; "
                "(exit $rc)")
_GPU = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)\s*$")
_REPLAYS = re.compile(r"^\s+Replays Since Reset\s*:\s*(\d+)\s*$")
_ROLLOVERS = re.compile(r"^\s+Replay Number Rollovers\s*:\s*(\d+)\s*$")
ROLLOVER = 1 << 32  # NVML counts replays in a 32-bit counter and the rollovers apart


def parse_replays(output: str) -> dict[str, int]:
    """Bus address (normalized) -> PCIe replays since the GPU's reset (rollovers counted in)."""
    found: dict[str, int] = {}
    bus = None
    for line in output.splitlines():
        if (gpu := _GPU.match(line)) is not None:
            bus = normalize_bus(gpu.group(1))
        elif bus is not None and (replays := _REPLAYS.match(line)) is not None:
            found[bus] = found.get(bus, 0) + int(replays.group(1))
        elif bus is not None and (rolled := _ROLLOVERS.match(line)) is not None:
            found[bus] = found.get(bus, 0) + int(rolled.group(1)) * ROLLOVER
    return found
