"""The README's first command, `deploy/demo`: daemon on a local Git repo configures the testbed, applies a
commit and heals a hand edit."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.daemon.harness import REPO
from tests.testbed_fixture import REGISTRY, _testbed_cli, unavailable
from tests.wheel_fixture import InstalledWheel

pytestmark = pytest.mark.timeout(600)


def test_deploy_demo_end_to_end(installed_wheel: InstalledWheel) -> None:
    """deploy/demo runs to the end: first apply, partition commit in sinfo, hand edit healed.

    The daemon is the `reconciler` of a wheel installed into a fresh venv (not the checkout)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    name, subnet = REGISTRY.next_name_and_subnet()
    try:
        out = subprocess.run([str(REPO / "deploy" / "demo"), "--nodes", "2", "--name", name, "--subnet", subnet,
                              "--down"], capture_output=True, text=True, timeout=540, cwd=REPO,
                             env={**os.environ, "RECONCILER_CMD": str(installed_wheel.reconciler)})
    finally:
        _testbed_cli("down", "--name", name)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"reconciler command: {installed_wheel.reconciler} (reconciler, version" in out.stdout
    latency = re.search(r"commit-to-applied latency: ([\d.]+) s", out.stdout)
    healed = re.search(r"detected and healed after ([\d.]+) s", out.stdout)
    assert latency and healed, out.stdout
    assert float(latency.group(1)) < 2 + 10 and float(healed.group(1)) < 5 + 10
    assert re.search(r"^demo +up +30:00 +2 +idle gpu\[01-02\]$", out.stdout, re.M), out.stdout
    assert '"event": "drift.detected"' in out.stdout and "drift:          0 resource(s)" in out.stdout
