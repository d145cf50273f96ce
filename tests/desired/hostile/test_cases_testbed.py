"""Every hostile case passed to `reconciler apply` on a configured testbed changes no file on any node.

The testbed is first configured with the base desired state (the one the cases are merged into), so the
managed files exist; then every managed file (and every file under the directories they live in) is
hashed on every node before and after each refused apply.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli.main import main
from tests.desired.hostile.cases import Case, load_cases, write_case
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[3]
HASH_ALL = ("find /etc/slurm /etc/exports /etc/fstab /srv/shared /root/.ssh /etc/cron.d -xdev -type f -print0 "
            "2>/dev/null | sort -z | xargs -0 -r sha256sum")


def _hashes(bed: Testbed) -> dict[str, str]:
    return {node: bed.run(node, HASH_ALL, check=True).stdout for node in bed.nodes}


def test_hostile_cases_change_nothing_on_the_nodes(testbed_factory: Callable[..., Testbed], tmp_path: Path) -> None:
    bed = testbed_factory(nodes=2, bare=True)
    base = Case("base", "the valid base", "", None, None, None)
    base_dir = write_case(base, tmp_path / "base", state_dir=bed.state_dir, subnet=bed.subnet, name="rthostile")
    applied = subprocess.run([sys.executable, "-m", "reconciler.cli", "apply", str(base_dir), "--yes"],
                             capture_output=True, text=True, timeout=300, cwd=REPO)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    before = _hashes(bed)
    assert "/etc/slurm/slurm.conf" in before["ctl"] and "/etc/fstab" in before["gpu01"]
    runner = CliRunner()
    for case in load_cases():
        directory = write_case(case, tmp_path / case.name, state_dir=bed.state_dir, subnet=bed.subnet,
                               name="rthostile")
        result = runner.invoke(main, ["apply", str(directory), "--yes"])
        assert result.exit_code == 1, f"{case.name}: {result.output}"
        assert "nothing was applied" in result.output and case.expect in result.output, f"{case.name}: {result.output}"
        assert _hashes(bed) == before, f"{case.name} changed a file on a node"
