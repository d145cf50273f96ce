"""Landing a node-side fault inside a running `reconciler apply`, at a seeded random point of a chosen phase.

Phases: `gather` (a watcher inside the node fires while the fact-gathering python3 runs there), `write` (while the
remote writer runs there), `timed` (a random delay within the apply's measured duration). A fault that would land
after the apply ended is not injected (the watcher stands down), so every counted injection hit a live apply.
"""

from __future__ import annotations

import random
import shlex
import subprocess
import time
from dataclasses import dataclass

from tests.faults.bed import COMPUTES, FaultBed
from tests.testbed_fixture import NODE_PATH

# pgrep patterns for the processes of each phase on a node (a bracket keeps the watcher from matching itself)
PHASES = {"gather": "python3 -I -S -[c]", "write": "reconciler[-]tmp"}
STOP = "/tmp/fault-watch-stop"
ALL_PHASES = ("gather", "write", "timed")


@dataclass
class Landing:
    """Where one fault landed and what the apply said."""

    phase: str
    hit: bool  # the fault landed while the apply ran
    rc: int
    output: str

    def names_failure(self, node: str) -> bool:
        """The apply's output reports NODE as failed or unreachable and the apply exited non-zero."""
        lines = self.output.splitlines()
        said = any(node in ln and ("unreachable" in ln or "FAILED" in ln) for ln in lines)
        pairs = zip(lines, lines[1:], strict=False)
        said = said or any(ln == f"{node}:" and "unreachable" in after for ln, after in pairs)
        return self.rc != 0 and said


def _watcher(bed: FaultBed, node: str, pattern: str, delay: float, action: str) -> subprocess.Popen[str]:
    """A shell inside NODE that runs ACTION DELAY seconds after PATTERN's process shows up, unless told to stop."""
    script = (f"rm -f {STOP}; i=0; while [ $i -lt 6000 ]; do [ -e {STOP} ] && {{ echo MISSED; exit 0; }}; "
              f"if pgrep -f {shlex.quote(pattern)} >/dev/null; then sleep {delay:.3f}; {action}; echo CAUGHT; "
              f"exit 0; fi; i=$((i+1)); sleep 0.005; done; echo MISSED")
    argv = ["nsenter", "-t", str(bed.testbed.pid1(node)), "-a", "--", "/usr/bin/env", "-i", f"PATH={NODE_PATH}",
            "HOME=/root", "/bin/sh", "-c", script]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def apply_seconds(bed: FaultBed, cache: dict[str, float] = {}) -> float:  # noqa: B006 - measured once
    """How long a fault-free apply of one payload bump takes here (measured once, for `timed` landings)."""
    if "s" not in cache:
        bed.bump()
        started = time.monotonic()
        bed.cli("apply", str(bed.desired), "--yes")
        cache["s"] = time.monotonic() - started
        assert bed.plan_clean()
    return cache["s"]


def land_during_apply(bed: FaultBed, rng: random.Random, node: str, action: str, phase: str) -> Landing:
    """Start `apply --yes`, run ACTION inside NODE at a random point of PHASE, wait for the apply."""
    if phase == "timed":
        window = apply_seconds(bed)
        proc = bed.apply_process()
        time.sleep(rng.uniform(0.3, max(0.4, window * 0.9)))
        hit = proc.poll() is None
        if hit:
            bed.exec(node, action)
        out, _ = proc.communicate(timeout=400)
        return Landing(phase, hit, proc.returncode, out)
    watcher = _watcher(bed, node, PHASES[phase], rng.uniform(0.0, 0.05), action)
    time.sleep(0.2)
    proc = bed.apply_process()
    out, _ = proc.communicate(timeout=400)
    bed.exec(node, f"touch {STOP}")
    said, _ = watcher.communicate(timeout=60)
    return Landing(phase, "CAUGHT" in said, proc.returncode, out)


def others_new(bed: FaultBed, node: str, version: int) -> dict[str, int | str]:
    """The payload versions of the compute nodes other than NODE that are not VERSION (empty: all new)."""
    return {n: v for n, v in bed.versions([n for n in COMPUTES if n != node]).items() if v != version}


def stray_temp_files(bed: FaultBed, nodes: list[str], directory: str) -> int:
    """The writer's temp files left in DIRECTORY on NODES (a write that failed must leave none)."""
    return sum(int(bed.exec(n, f"ls -a {directory} | grep -c 'reconciler-tmp' || true").stdout.strip() or 0)
               for n in nodes)

