"""The Slurm release of a testbed: the host's own, or another built once with debootstrap and cached.

Every node's root is an overlay whose lower layer is either the host's ``/`` (the host's Slurm, e.g. 22.05 on
Debian 12, 24.11 on Debian 13) or a Debian root built by ``debootstrap --variant=minbase`` for the other release
(``bookworm`` gives 22.05, ``trixie`` gives 24.11) with the daemons and tools a node runs. The root is built once
into ROOTS/<suite>-<key> (key: a hash of the suite, mirror and package list, so a changed list builds a new root),
atomically (a temporary directory renamed into place), under a lock so parallel `up`s build it once.
Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

# Slurm release -> the Debian suite that ships it. 26.05 comes from forky (testing; sid carries the same 26.05.5-1):
# a root built from the suite that ships a release gives every node a coherent set of that release's packages and
# libraries, what a site running it has, as 24.11 comes from trixie. Upgrading the 24.11 root in place would mix
# suites; that is what the 24.11 -> 26.05 upgrade test does on purpose (package_repo.py, issue 44).
RELEASES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "forky"}
ROOTS = Path(os.environ.get("RECONCILER_TESTBED_ROOTS", "/var/cache/reconciler-testbed/roots"))
MIRROR = os.environ.get("RECONCILER_TESTBED_MIRROR", "http://deb.debian.org/debian")
# What a node runs or a test calls inside a node (the host's list is testbed.py's DEBIAN_PACKAGES): sshd, munge, the
# Slurm daemons and clients, supervisord, the NFS server's exportfs, slurmdbd and MariaDB for --accounting,
# libslurm-dev for the headers the Pyxis stand-in is compiled against (its spank.h must be this release's).
ROOT_PACKAGES = ["openssh-server", "openssh-client", "munge", "slurmctld", "slurmd", "slurm-client", "supervisor",
                 "iproute2", "netcat-openbsd", "squashfs-tools", "nfs-kernel-server", "python3",
                 "python3-clustershell", "slurmdbd", "mariadb-server", "libslurm-dev", "procps", "psmisc",
                 "hostname", "sudo", "kmod"]
MARK = ".reconciler-testbed-root.json"  # written last into a finished root: its suite, packages, Slurm version
# debootstrap's script for a suite it has none for (debootstrap 1.0.128, Debian 12's, knows trixie but not forky)
SUITE_SCRIPTS = {"forky": "sid"}
BUILD_TIMEOUT = 1200


class RootError(Exception):
    """A release that cannot be had here, with the reason."""


def _release_of(version: str) -> str:
    """'24.11.5-4+deb13u1' -> '24.11'."""
    m = re.match(r"^(?:\d+:)?(\d+)\.(\d+)", version)
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def installed_release(root: Path = Path("/")) -> str:
    """The Slurm release (e.g. '22.05') slurmctld is installed at under ROOT, '' when it is not installed."""
    status = root / "var/lib/dpkg/status"
    try:
        text = status.read_text(errors="replace")
    except OSError:
        return ""
    for stanza in text.split("\n\n"):
        if re.search(r"^Package: slurmctld$", stanza, re.M) and re.search(r"^Status: install ok installed$",
                                                                            stanza, re.M):
            m = re.search(r"^Version: (\S+)$", stanza, re.M)
            return _release_of(m.group(1)) if m else ""
    return ""


def host_release() -> str:
    """The host's Slurm release ('' when the host has no slurmctld)."""
    return installed_release(Path("/"))


def default_release() -> str:
    """The release a testbed gets without --slurm: the host's, else the newest the testbed can build."""
    return host_release() or max(RELEASES, key=lambda r: tuple(int(x) for x in r.split(".")))


def root_key(release: str) -> str:
    """Hash naming a built root: suite, mirror and package list."""
    data = json.dumps({"suite": RELEASES[release], "mirror": MIRROR, "packages": sorted(ROOT_PACKAGES)})
    return hashlib.sha256(data.encode()).hexdigest()[:12]


def built_root(release: str) -> Path:
    """Where the built root of RELEASE lives (it may not exist yet)."""
    return ROOTS / f"{RELEASES[release]}-{root_key(release)}"


def is_built(path: Path) -> bool:
    """Whether PATH is a finished root (its mark written)."""
    return (path / MARK).is_file()


def lower_root(release: str) -> Path:
    """The lower layer for RELEASE's nodes: '/' for the host's release, else its built root (must exist)."""
    if release not in RELEASES:
        raise RootError(f"Slurm {release} is not a testbed release (choose from {', '.join(RELEASES)})")
    if release == host_release():
        return Path("/")
    path = built_root(release)
    if not is_built(path):
        raise RootError(f"the Slurm {release} root is not built: run `deploy/testbed/testbed deps` "
                        f"(or `testbed up --slurm {release}`, which builds it)")
    return path


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive flock on PATH (created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def ensure_root(release: str, log: Callable[[str], None]) -> Path:
    """lower_root(RELEASE), building the root with debootstrap first when it is missing."""
    if release not in RELEASES:
        raise RootError(f"Slurm {release} is not a testbed release (choose from {', '.join(RELEASES)})")
    if release == host_release():
        return Path("/")
    final = built_root(release)
    with _lock(ROOTS / f".{final.name}.lock"):
        if is_built(final):
            return final
        build(release, final, log)
    return final


def build(release: str, final: Path, log: Callable[[str], None]) -> None:
    """debootstrap RELEASE's suite into a temporary directory, check it, and rename it to FINAL."""
    if shutil.which("debootstrap") is None:
        raise RootError("debootstrap is not installed: run `deploy/testbed/testbed deps`")
    suite = RELEASES[release]
    tmp = final.with_name(f".{final.name}.building")
    if tmp.exists():
        shutil.rmtree(tmp)
    started = time.monotonic()
    log(f"building the Slurm {release} root ({suite}) in {final} with debootstrap (once; about 2 minutes)")
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(ROOT_PACKAGES)}", suite, str(tmp), MIRROR]
    script = SUITE_SCRIPTS.get(suite, "")
    if script and not Path(f"/usr/share/debootstrap/scripts/{suite}").exists():
        cmd.append(f"/usr/share/debootstrap/scripts/{script}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        shutil.rmtree(tmp, ignore_errors=True)
        raise RootError(f"debootstrap {suite} failed ({proc.returncode}):\n{tail}")
    for debs in (tmp / "var/cache/apt/archives").glob("*.deb"):
        debs.unlink()
    got = installed_release(tmp)
    if got != release:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RootError(f"debootstrap {suite} gave Slurm {got or 'nothing'}, not {release}")
    (tmp / MARK).write_text(json.dumps({"suite": suite, "release": release, "mirror": MIRROR,
                                        "packages": sorted(ROOT_PACKAGES)}, indent=2) + "\n")
    os.replace(tmp, final)
    log(f"Slurm {release} root built in {time.monotonic() - started:.0f}s")


def other_releases() -> list[str]:
    """The releases the host does not have (those `deps` builds)."""
    return [r for r in RELEASES if r != host_release()]
