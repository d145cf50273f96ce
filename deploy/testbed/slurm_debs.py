"""Debian's own Slurm packages for the testbed's package repository: 24.11 (trixie) and 26.05 (sid), with the few
libraries 26.05 needs beyond what a trixie node has, for a real Slurm major upgrade on a 24.11 testbed (issue 44).

Nothing is rebuilt: these are Debian's binaries, fetched once by `testbed deps` (or `package_repo.py fetch`) into
the deb cache. Which files a trixie node needs is not guessed: apt itself resolves `slurmd=V slurmctld=V ...`
against the 24.11 nodes' own dpkg database (their lower layer: the host's `/` on Debian 13, else the debootstrapped
trixie root), with a private apt configuration (its own sources, lists and cache under the deb cache; the host's
apt sources are not touched) offering trixie, trixie-backports (priority 500: the newer libhwloc15 26.05 needs)
and sid (priority 100: only what nothing else offers), and every package it would install is downloaded at the
version it chose. Standard library only, like the rest of deploy/testbed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# The Slurm packages a cluster names in `packages:` (the daemons, the commands, the plugins slurmdbd and the
# daemons load); libslurm-dev is not offered (only the Pyxis stand-in's headers need it, on the root as built).
PACKAGES = ["slurmd", "slurmctld", "slurmdbd", "slurm-client", "slurm-wlm-basic-plugins", "slurm-wlm-mysql-plugin"]
FROM_RELEASE = "24.11"  # the release the testbed's trixie nodes run, and its suite
SUITES = {"24.11": "trixie", "26.05": "sid"}  # release -> the Debian suite its packages are taken from
EXTRA_SUITES = ["trixie-backports"]
KEYRING = "usr/share/keyrings/debian-archive-keyring.gpg"  # in the 24.11 root: trixie's keyring signs sid too
APT_TIMEOUT = 600


class SlurmDebsError(Exception):
    """A failure fetching Debian's Slurm packages, worth a one-line message."""


def _apt_options(work: Path, root: Path) -> list[str]:
    """apt-get/apt-cache options of the private configuration under WORK, judging against ROOT's dpkg database."""
    return ["-o", f"Dir::State::status={root / 'var/lib/dpkg/status'}",
            "-o", f"Dir::Etc::SourceList={work / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::Etc::Preferences={work / 'preferences'}", "-o", "Dir::Etc::PreferencesParts=/nonexistent",
            "-o", f"Dir::State::Lists={work / 'lists'}", "-o", f"Dir::Cache={work / 'cache'}",
            "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root", "-o", "APT::Architecture=amd64"]


def _configure(work: Path, root: Path, mirror: str) -> None:
    """The private sources (trixie, trixie-backports, sid; signed by ROOT's Debian keyring) and pins."""
    keyring = root / KEYRING
    if not keyring.exists():
        raise SlurmDebsError(f"no Debian archive keyring at {keyring}")
    for sub in ("lists/partial", "cache/archives/partial"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    suites = [SUITES[FROM_RELEASE], *EXTRA_SUITES, *[s for r, s in SUITES.items() if r != FROM_RELEASE]]
    (work / "sources.list").write_text("".join(f"deb [signed-by={keyring}] {mirror} {s} main\n" for s in suites))
    pins = [(s, 100) for r, s in SUITES.items() if r != FROM_RELEASE] + [(s, 500) for s in EXTRA_SUITES]
    (work / "preferences").write_text("\n".join(f"Package: *\nPin: release n={s}\nPin-Priority: {p}\n"
                                                for s, p in pins))


def _apt(args: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=APT_TIMEOUT,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
                               "LC_ALL": "C"})
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
        raise SlurmDebsError(f"{' '.join(args[:2])} failed ({proc.returncode}): {tail}")
    return proc.stdout


def newest(options: list[str], package: str, suite: str) -> str:
    """The version of PACKAGE that SUITE offers (apt-cache madison, the private configuration)."""
    for line in _apt(["apt-cache", *options, "madison", package]).splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[0] == package and f" {suite}/" in f" {parts[2]}":
            return parts[1]
    raise SlurmDebsError(f"{package} is not in Debian {suite}")


def resolve(options: list[str], version: str) -> list[tuple[str, str]]:
    """(package, version) of everything apt would install on a 24.11 node for PACKAGES at VERSION (simulated)."""
    out = _apt(["apt-get", *options, "-s", "-q", "install", "--no-install-recommends",
                *[f"{p}={version}" for p in PACKAGES]])
    found = re.findall(r"^Inst (\S+) (?:\[[^]]*\] )?\((\S+) ", out, re.M)
    missing = [p for p in PACKAGES if p not in {name for name, _ in found}]
    if missing:
        raise SlurmDebsError(f"apt would not install {', '.join(missing)} at {version}: {out[-400:]}")
    return found


def fetch(cache: Path, root: Path, mirror: str) -> dict:
    """Download 24.11's and 26.05's Slurm packages (and what 26.05 needs on a 24.11 node) into CACHE; return the
    record: releases (release -> version), packages (PACKAGES), files (every .deb, by name)."""
    work = cache / "slurm-apt"
    _configure(work, root, mirror)
    options = _apt_options(work, root)
    _apt(["apt-get", *options, "-q", "update"])
    releases = {release: newest(options, "slurmd", suite) for release, suite in SUITES.items()}
    wanted: dict[tuple[str, str], None] = {(p, releases[FROM_RELEASE]): None for p in PACKAGES}
    for release, version in releases.items():
        if release != FROM_RELEASE:
            wanted.update(dict.fromkeys(resolve(options, version)))
    files = []
    for package, version in wanted:
        have = _cached(cache, package, version)
        if have is None:
            _apt(["apt-get", *options, "-q", "download", f"{package}={version}"], cwd=cache)
            have = _cached(cache, package, version)
            if have is None:
                raise SlurmDebsError(f"apt-get download {package}={version} left no file in {cache}")
        files.append(have.name)
    shutil.rmtree(work / "cache", ignore_errors=True)
    return {"releases": releases, "packages": PACKAGES, "files": sorted(files)}


def _cached(cache: Path, package: str, version: str) -> Path | None:
    """The .deb of PACKAGE=VERSION in CACHE (apt-get download's file name: the epoch's colon as %3a)."""
    quoted = version.replace(":", "%3a")
    return next((f for f in cache.glob(f"{package}_{quoted}_*.deb")), None)
