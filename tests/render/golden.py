"""Golden renders: every managed file of every node of the bundled desired states, as rendered before issue 12.

`python -m tests.render.golden` rewrites tests/fixtures/render_golden/ (run it only when a change of the rendered
bytes is intended); tests/render/test_render_golden.py compares today's renders with it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

from reconciler.desired.inventory import node_specs
from reconciler.desired.loader import load_dir
from reconciler.render.files import managed_files_for, render_file

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "render_golden"
SOURCE = "golden"


def testbed_state(directory: Path, computes: int = 2) -> Path:
    """Write the testbed generator's desired state for a fixed, fake layout into `directory`."""
    sys.path.insert(0, str(ROOT / "deploy" / "testbed"))
    import desired_state  # type: ignore[import-not-found]

    names = [f"gpu{i:02d}" for i in range(1, computes + 1)]
    layout = SimpleNamespace(name="golden", subnet="10.99.0", compute_nodes=names, desired_state=directory,
                             ssh_config=Path("/tb/ssh_config"), known_hosts=Path("/tb/known_hosts"),
                             identity=Path("/tb/id"))
    return Path(desired_state.write(layout, cpus=4, memory_mb=1000, gpus=8))


def renders(directory: Path) -> dict[str, str]:
    """node/file -> rendered text, for every managed file of every node."""
    state = load_dir(directory).state
    return {f"{node}/{name}": render_file(state, node, name, SOURCE)
            for node in sorted(node_specs(state)) for name in managed_files_for(state, node)}


def current() -> dict[str, dict[str, str]]:
    """Today's renders of desired-state/ and the testbed's generated state."""
    with tempfile.TemporaryDirectory() as tmp:
        return {"desired-state": renders(ROOT / "desired-state"), "testbed": renders(testbed_state(Path(tmp)))}


if __name__ == "__main__":
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, files in current().items():
        (GOLDEN / f"{name}.json").write_text(json.dumps(files, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {len(files)} files")
