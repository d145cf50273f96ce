"""What the upgrade tests on the testbed share: the driver stand-in pair's packages.yaml, the CLI, Slurm fields."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.testbed_fixture import Testbed

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
