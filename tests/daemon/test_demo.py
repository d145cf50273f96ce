"""The README's first command, `deploy/demo`: daemon on a local Git repo configures the testbed, applies a
commit, heals a hand edit, catches a failing prolog on the canary (rolled back, not retried) and rolls the fix out
in waves."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.daemon.harness import REPO
from tests.testbed_fixture import ALL_RELEASES, REGISTRY, _testbed_cli, host_release, unavailable
from tests.wheel_fixture import InstalledWheel

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("release", ALL_RELEASES)  # 26.05 too: issue 44 item 5
def test_deploy_demo_end_to_end(installed_wheel: InstalledWheel, release: str) -> None:
    """deploy/demo runs to the end on each Slurm release: first apply, partition commit in sinfo, hand edit healed,
    bad prolog caught by the canary's smoke job and the cluster whole again, the commit not retried, the fix out in
    two gated waves.

    The daemon is the `reconciler` of a wheel installed into a fresh venv (not the checkout). The host's release
    runs the demo as the README gives it; another release is what a host of that Debian (12, 13, forky) would run
    by default (`--slurm` only picks the testbed's root)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    name, subnet = REGISTRY.next_name_and_subnet()
    other = [] if release == host_release() else ["--slurm", release]
    try:
        out = subprocess.run([str(REPO / "deploy" / "demo"), "--nodes", "2", "--name", name, "--subnet", subnet,
                              *other, "--down"], capture_output=True, text=True, timeout=540, cwd=REPO,
                             env={**os.environ, "RECONCILER_CMD": str(installed_wheel.reconciler)})
    finally:
        _testbed_cli("down", "--name", name)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"reconciler command: {installed_wheel.reconciler} (reconciler, version" in out.stdout
    latency = re.search(r"commit-to-applied latency: ([\d.]+) s", out.stdout)
    healed = re.search(r"detected and healed after ([\d.]+) s", out.stdout)
    assert latency and healed, out.stdout
    # Sanity bounds on the demo's printed wall times, which include the runs' own work on a loaded machine (a heal
    # may wait for the drift check in flight, the interval, then a whole run): poll or drift interval + 20 s.
    # How many polls or drift checks it took is tested exactly in test_daemon_testbed.py.
    assert float(latency.group(1)) < 2 + 20 and float(healed.group(1)) < 5 + 20
    assert re.search(r"^demo +up +30:00 +2 +idle gpu\[01-02\]$", out.stdout, re.M), out.stdout
    assert '"event": "drift.detected"' in out.stdout and "drift:          0 resource(s)" in out.stdout
    act6 = out.stdout[out.stdout.index("== 6. "):out.stdout.index("== 7. ")]
    act7 = out.stdout[out.stdout.index("== 7. "):]
    # The canary's smoke job caught the bad prolog; only gpu01 had it, and the rollback resumed it.
    bad = re.search(r"^rolled back: +([0-9a-f]{12}) .*wave 1 gate smoke-job on gpu01: .*Prolog error", act6, re.M)
    assert bad, act6
    assert re.search(r"caught on the canary and rolled back [\d.]+ s after the push", act6), act6
    assert re.search(r"rolled back gpu01 to [0-9a-f]{12}; resumed gpu01", act6), act6
    assert re.search(r"cluster whole again \(prolog restored on gpu01, no node drained\) [\d.]+ s after", act6)
    assert re.search(r"^demo +up +30:00 +2 +idle gpu\[01-02\]$", act6, re.M), act6
    # Not retried: the daemon skips it, and it never ran a second time.
    assert '"event": "commit.rolled_back_skipped"' in act6 and bad.group(1) in act6
    assert f"runs of the rolled-back {bad.group(1)} in all: 1 (never retried)" in act7, act7
    # The fix: two gated waves, canary first, every gate passed.
    assert re.search(r"commit-to-applied latency with the gates: [\d.]+ s", act7), act7
    assert re.search(r"rollout [\d.]+ s in 2 wave\(s\) \(gpu01, gpu02\): the gates took [\d.]+ s", act7), act7
    assert re.search(r"wave 1 \(canary\) gpu01: node-checks ok [\d.]+s; smoke-job ok [\d.]+s; soak ok", act7), act7
    assert re.search(r"wave 2 \(step 1\) gpu02: node-checks ok [\d.]+s; smoke-job ok [\d.]+s", act7), act7
    assert "FAILED" not in act7
