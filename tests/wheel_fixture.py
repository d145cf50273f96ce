"""A wheel of this checkout installed (not editable) into a fresh venv, once per test session."""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
import tempfile
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@dataclass
class InstalledWheel:
    """The venv holding the installed wheel."""

    wheel: Path
    prefix: Path

    @property
    def reconciler(self) -> Path:
        """The console script the wheel installed."""
        return self.prefix / "bin" / "reconciler"

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.prefix / "bin" / "python"

    def site_packages(self) -> Path:
        """The venv's site-packages directory."""
        return next((self.prefix / "lib").glob("python3*/site-packages"))


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstalledWheel]:
    """Build the wheel with pip (isolated build) and install it with its dependencies into a new venv."""
    work = tmp_path_factory.mktemp("wheel")
    # pip builds in the checkout itself (build/, *.egg-info): two pytest workers building at once broke each
    # other's build ("Building wheel ... did not run successfully"), so one builds at a time
    lock = Path(tempfile.gettempdir()) / f"reconciler-wheel-{hashlib.sha256(str(REPO).encode()).hexdigest()[:12]}.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"),
                                str(REPO)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheel = next((work / "dist").glob("reconciler-*.whl"))
    prefix = work / "venv"
    venv.create(prefix, with_pip=True, system_site_packages=False)
    install = subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                             capture_output=True, text=True, timeout=900, cwd=work)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    yield InstalledWheel(wheel=wheel, prefix=prefix)
