"""What the upgrade tests on the testbed share: the driver stand-in pair's packages.yaml, the CLI, Slurm fields."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from functools import cmp_to_key
from pathlib import Path
from typing import Any

from reconciler.common.versions import deb_compare
from tests.daemon.harness import DaemonProcess, GitRemote, write_config
from tests.testbed_fixture import Testbed
from tests.transport.sshd_server import free_port

REPO = Path(__file__).resolve().parents[2]
DRIVER, FM = "nvidia-driver-standin", "nvidia-fabricmanager-standin"


def field(line: str, name: str) -> str:
    """One NAME=value of a `scontrol show -o` line (the reason runs to the end of the line)."""
    found = re.search(rf"\b{name}=(.*?)(?= [A-Z][A-Za-z]*=|$)", line.strip())
    return found.group(1) if found else ""


def pair(version: str, nodes: str, needs: str | None = None) -> str:
    """packages.yaml: the driver (with NEEDS, if any) and fabric manager stand-ins at VERSION on NODES."""
    driver = f'{{version: "{version}"{f", needs: {needs}" if needs else ""}}}'
    return (f'packages:\n  - nodes: "{nodes}"\n    packages:\n      {DRIVER}: {driver}\n      {FM}: "{version}"\n')


def package_bed(testbed_factory: Callable[..., Testbed], nodes: int) -> Testbed:
    """NODES compute nodes, Slurm, the package repository; idle."""
    testbed = testbed_factory(nodes=nodes, packages=True)
    testbed.wait_idle(timeout=120)
    return testbed


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The reconciler CLI, run from the checkout."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def poll(what: str, done: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    """DONE()'s first truthy value, polled every EVERY seconds (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = done()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def daemon(root: Path, remote: GitRemote, state_dir: Path, n: int, failpoints: str = "",
           env: dict[str, str] | None = None) -> DaemonProcess:
    """`reconciler run` (enforce, 1 s polls) on REMOTE with STATE_DIR; FAILPOINTS: RECONCILER_FAILPOINTS; ENV: more
    of the daemon's environment."""
    config = write_config(root / f"config{n}.yaml", repository={"url": str(remote.bare), "branch": "main"},
                          mode="enforce", poll_interval="1s", drift_interval="1h", state_dir=str(state_dir),
                          metrics_listen=f"127.0.0.1:{free_port()}", log_format="json",
                          retry={"initial": "2s", "max": "10s"}, checks_after_apply=False)
    return DaemonProcess(config=config, state_dir=state_dir, log_path=root / f"daemon{n}.log",
                         env={**({"RECONCILER_FAILPOINTS": failpoints} if failpoints else {}), **(env or {})}).start()


def versions(bed: Testbed) -> tuple[str, str]:
    """The oldest and newest stand-in driver versions of BED's package repository."""
    found = sorted(bed.package_manifest["deb"]["standin"][DRIVER], key=cmp_to_key(deb_compare))
    return found[0], found[-1]


def seeded(bed: Testbed, root: Path, packages: str) -> Path:
    """BED's desired state copied under ROOT with PACKAGES as packages.yaml, applied by the CLI; its directory."""
    desired = root / "desired"
    shutil.copytree(bed.desired_state, desired)
    (desired / "packages.yaml").write_text(packages)
    first = cli("apply", "--yes", str(desired))
    assert first.returncode == 0, first.stdout + first.stderr
    return desired
