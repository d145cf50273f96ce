"""The costliest desired-state inputs a loader must read or refuse within its bounds (issue 22).

Shared by tests/hostile (which asserts the bounds) and bench/hostile.py (which prints the figures).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from reconciler.desired.loader import LoadLimits

REPO = Path(__file__).resolve().parents[3]

_SHAPES = {
    # the biggest allowed file of one-key mappings, of a flow list, of a block scalar, of anchors and aliases,
    # and one with a hostile construct at its very end (the whole file is read before it is refused)
    "mappings": lambda: "nodes:\n" + "".join(f"  - name: gpu{i:06d}\n    host: 10.1.{i % 250}.{i % 200}\n"
                                             for i in range(40_000)),
    "flow": lambda: "x: [" + ", ".join(f"a{i}" for i in range(120_000)) + "]\n",
    "block": lambda: "x: |\n" + "".join("  " + "a" * 76 + "\n" for _ in range(12_500)),
    "aliases": lambda: "a: &a [1, 2, 3]\nb: [" + ", ".join("*a" for _ in range(1600)) + "]\n",
    "tag-at-end": lambda: "nodes:\n" + "".join(f"  - name: gpu{i:06d}\n" for i in range(50_000)),
    "hostlist-product": lambda: "nodes:\n" + "".join(f"  - name: r{i}[1-1000]n[1-1000]g[1-1000]\n"
                                                     for i in range(20_000)),
    "hostlists-past-state-bound": lambda: "patches:\n" + "".join(
        f"  - name: p{i}\n    path: /etc/p{i}\n    nodes: n{i}x[1-60000]\n    content: x\n" for i in range(8_000)),
}
SHAPES = sorted(_SHAPES)


def worst_case(shape: str, limit: int | None = None) -> str:
    """The text of SHAPE cut to at most LIMIT bytes (default: the loader's file limit), still valid YAML."""
    limit = limit or LoadLimits().max_file_bytes
    text = _SHAPES[shape]()
    if shape == "flow":
        return text[: limit - 100].rsplit(",", 1)[0] + "]\n"
    if shape == "tag-at-end":
        return text[: text.rfind("\n  - ", 0, limit - 200)] + "\nx: !!python/tuple []\n"
    if len(text) > limit:
        marker = "\n  - " if "\n  - " in text else "\n"  # cut between list items, or between lines
        text = text[: text.rfind(marker, 0, limit - 100) + 1]
    return text


PROBE = ("import json, sys, time\nfrom reconciler.desired.loader import DesiredStateError, load_dir\n"
         "t = time.perf_counter()\ntry:\n    load_dir(sys.argv[1]); errors = []\n"
         "except DesiredStateError as e:\n    errors = [str(x) for x in e.errors]\n"
         "s = time.perf_counter() - t\n"
         "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
         "print(json.dumps({'s': s, 'mb': int(hwm) / 1024, 'errors': errors[:3], 'count': len(errors)}))\n")


def measure(directory: Path) -> dict[str, object]:
    """Load DIRECTORY in a fresh interpreter: seconds in load_dir, peak resident MiB of the process, errors."""
    done = subprocess.run([sys.executable, "-c", PROBE, str(directory)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, object] = json.loads(done.stdout)
    return result
