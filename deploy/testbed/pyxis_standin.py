"""Build the testbed's Pyxis STAND-IN (standins/pyxis-standin.c, a SPANK plugin) once, cached by content hash.

gcc compiles it against Debian's libslurm-dev headers (`testbed deps` installs both). Without them the nodes get
`pyxis-standin.unavailable` with the reason instead of the plugin, and tests that need it skip naming it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "standins" / "pyxis-standin.c"
HELPER = HERE / "standins" / "pyxis-standin-start"
SPANK_H = Path("/usr/include/slurm/spank.h")
NODE_DIR = "usr/lib/reconciler-testbed"  # in a node: /usr/lib/reconciler-testbed/pyxis-standin.so
PLUGIN = f"/{NODE_DIR}/pyxis-standin.so"
UNAVAILABLE = f"/{NODE_DIR}/pyxis-standin.unavailable"


@functools.cache
def build(cache: Path, root: Path = Path("/")) -> tuple[bytes | None, str]:
    """The compiled plugin (None and why not, when it cannot be built here), against ROOT's Slurm headers: a
    SPANK plugin loads only into the Slurm release whose spank.h it was built with."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None, "gcc is not installed (deploy/testbed/testbed deps installs it)"
    spank_h = root / SPANK_H.relative_to("/")
    if not spank_h.exists():
        return None, f"{spank_h} is missing: libslurm-dev is not installed (deploy/testbed/testbed deps installs it)"
    version_h = spank_h.with_name("slurm_version.h")
    key = hashlib.sha256(SOURCE.read_bytes() + spank_h.read_bytes()
                         + (version_h.read_bytes() if version_h.exists() else b"")).hexdigest()[:16]
    cached = cache / f"pyxis-standin-{key}.so"
    if cached.exists():
        return cached.read_bytes(), ""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        out = Path(tmp) / "pyxis-standin.so"
        include = []
        if root != Path("/"):  # only <slurm/...> from ROOT; libc's headers stay the host compiler's own
            (Path(tmp) / "include").mkdir()
            (Path(tmp) / "include" / "slurm").symlink_to(spank_h.parent)
            include = ["-I", str(Path(tmp) / "include")]
        proc = subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-Wall", *include, "-o", str(out), str(SOURCE)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return None, f"gcc failed on {SOURCE.name}: {(proc.stderr or proc.stdout).strip()[:500]}"
        os.replace(out, cached)  # atomic: a concurrent `up` sees the whole file or none
    return cached.read_bytes(), ""


def files(cache: Path, root: Path = Path("/")) -> dict[str, tuple[bytes, int]]:
    """Node-relative path -> (content, mode) of the stand-in: the plugin and its helper, or the reason file."""
    plugin, why = build(cache, root)
    if plugin is None:
        return {UNAVAILABLE.lstrip("/"): (f"Pyxis stand-in not built: {why}\n".encode(), 0o644)}
    return {PLUGIN.lstrip("/"): (plugin, 0o755), f"{NODE_DIR}/pyxis-standin-start": (HELPER.read_bytes(), 0o755)}
