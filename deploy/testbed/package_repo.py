"""The testbed's package repository (`testbed up --packages`): apt and dnf on the nodes, served by ctl over HTTP.

Real Debian packages (fetched once from Debian's archive by `testbed deps`, or `package_repo.py fetch`, into
DEB_CACHE) and STAND-IN packages the testbed builds itself (``nvidia-*-standin``: dpkg-deb and rpmbuild, each
installing one small file) are indexed (dpkg-scanpackages, createrepo_c), put into ctl's upper layer and served
by a ``python3 -m http.server`` supervisord program on ctl. Every node's only apt source is that repository
(signed per testbed with a throwaway gpg key); dnf (Debian's) gets a repo file and a dnf.conf that work on a
Debian node. ``<state>/packages/manifest.json`` lists every version, real and stand-in, deb and rpm.
Standard library only, like the rest of deploy/testbed.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

import slurm_debs
import slurm_root

HERE = Path(__file__).resolve().parent
DEB_CACHE = Path(os.environ.get("RECONCILER_TESTBED_DEB_CACHE", "/var/cache/reconciler-testbed/debs"))
FETCHED = "fetched.json"  # in DEB_CACHE: which real packages and versions were fetched
PORT = 8873  # ctl's HTTP server (free on the testbed: sshd 22, Slurm 6817-6819, MariaDB 3306)
SERVED = "srv/reconciler-testbed/packages"  # in ctl (upper layer): deb/ and rpm/
KEYRING = "/etc/apt/keyrings/reconciler-testbed.gpg"  # in every node: the repository's public key
# A real arch:all leaf package with at least two versions in the host's suites (the first candidate that has
# them), for version pins; PRESENT_ABSENT are real packages the host lacks, for present/absent.
VERSIONED_CANDIDATES = ["tzdata", "distro-info-data", "publicsuffix", "media-types", "debian-archive-keyring"]
PRESENT_ABSENT = ["hello"]
# STAND-INS (no NVIDIA software here), each at every STANDIN_VERSIONS: name -> the stand-in it depends on, at
# the same version (as nvidia-fabricmanager needs the driver of its own version), or None.
STANDIN_VERSIONS = ["550.127.05-1", "570.86.15-1"]
STANDINS: dict[str, str | None] = {"nvidia-driver-standin": None,
                                   "nvidia-fabricmanager-standin": "nvidia-driver-standin",
                                   "libnvidia-nscq-standin": "nvidia-driver-standin"}
# A BROKEN 570 (every stand-in at this version; manifest "standin_broken"): its driver files make the stand-in
# nvidia-smi and dmesg report BROKEN_FAULTS once it is loaded (the next boot or driver reload): GPU 0 fallen off
# the bus (XID 79). Older than 570.86.15-1 by dpkg's and rpm's order, so no `present` or glob picks it by chance.
STANDIN_BROKEN = "570.86.15-0broken1"
BROKEN_FAULTS = "xid79 0\n"
# The driver stand-in's files: installed by the package, copied to DRIVER_LOADED when the node boots (node_init
# boot_copies) or the stand-in module nvidia_standin loads (modules_standin.py): the driver the stand-in
# nvidia-smi reports is the LOADED one, as a kernel module's, not the one installed since.
DRIVER_INSTALLED = "/usr/lib/reconciler-testbed-standin/nvidia-driver"
DRIVER_LOADED = "/run/reconciler-testbed-standin/nvidia-driver"
APT_TIMEOUT = 300
# A second repository no node is configured for (served under extra/, signed with a key of its own: the apt
# Release and the rpm itself), offering a STAND-IN package the main one lacks: a test adds the repository, its
# key and the package in one commit (manifest "extra").
EXTRA = "extra"
EXTRA_STANDINS = {"reconciler-extra-standin": ["1.0-1"]}
EXTRA_KEY = "reconciler-extra.asc"  # beside the manifest: the armored public key (RSA: rpm signs with it too)


class RepoError(Exception):
    """A failure building or serving the repository, worth a one-line message."""


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command and return its stdout; RepoError with its stderr when it fails."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RepoError(f"{' '.join(cmd[:3])} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


# ------------------------------------------------------------------------------------- real Debian packages


def madison(package: str) -> list[str]:
    """Versions of PACKAGE the host's apt sources offer (binary packages, newest first, no duplicates)."""
    proc = subprocess.run(["apt-cache", "madison", package], capture_output=True, text=True)
    versions: list[str] = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[0] == package and parts[2].endswith("Packages") and parts[1] not in versions:
            versions.append(parts[1])
    return versions


def deb_version_key(versions: list[str]) -> list[str]:
    """VERSIONS sorted oldest first by dpkg's ordering."""
    def cmp(a: str, b: str) -> int:
        if a == b:
            return 0
        lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0
        return -1 if lt else 1
    return sorted(versions, key=functools.cmp_to_key(cmp))


def fetch_real_debs(cache: Path = DEB_CACHE) -> dict[str, list[str]]:
    """Download every version of the first VERSIONED_CANDIDATES package with two or more, and PRESENT_ABSENT,
    from the host's apt sources into CACHE (kept; run `apt-get update` first); return package -> versions."""
    versioned = next((p for p in VERSIONED_CANDIDATES if len(madison(p)) >= 2), None)
    if versioned is None:
        raise RepoError(f"none of {', '.join(VERSIONED_CANDIDATES)} has two versions in this host's apt sources")
    cache.mkdir(parents=True, exist_ok=True)
    fetched: dict[str, list[str]] = {}
    for package in [versioned, *PRESENT_ABSENT]:
        versions = madison(package)
        if not versions:
            raise RepoError(f"{package} is not in this host's apt sources")
        for version in versions:
            if not any(_deb_field(f, "Version") == version for f in cache.glob(f"{package}_*.deb")):
                _run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", f"{package}={version}"],
                     cwd=cache)
        fetched[package] = deb_version_key(versions)
    try:
        slurm = slurm_debs.fetch(cache, slurm_root.lower_root(slurm_debs.FROM_RELEASE), slurm_root.MIRROR)
    except (slurm_debs.SlurmDebsError, slurm_root.RootError, subprocess.SubprocessError) as e:
        raise RepoError(f"Debian's Slurm packages: {e}") from e
    (cache / FETCHED).write_text(json.dumps({"versioned": versioned, "packages": fetched, "slurm": slurm},
                                            indent=2) + "\n")
    return {**fetched, **{f"slurm {r}": [v] for r, v in slurm["releases"].items()}}


def _deb_field(path: Path, name: str) -> str:
    """One control field of a .deb."""
    return _run(["dpkg-deb", "-f", str(path), name]).strip()


def fetched_debs(cache: Path = DEB_CACHE) -> tuple[dict, list[Path]]:
    """The fetch record and the .deb files it names, or RepoError saying how to fetch them."""
    try:
        record = json.loads((cache / FETCHED).read_text())
    except (OSError, ValueError) as e:
        raise RepoError(f"no real Debian packages in {cache} ({e}): run `deploy/testbed/testbed deps` "
                        f"or `deploy/testbed/package_repo.py fetch`") from e
    if "slurm" not in record:
        raise RepoError(f"{cache} has no Slurm packages (fetched before they were offered): run "
                        f"`deploy/testbed/testbed deps` or `deploy/testbed/package_repo.py fetch`")
    files = sorted(f for p in record["packages"] for f in cache.glob(f"{p}_*.deb"))
    files += [cache / name for name in record["slurm"]["files"]]
    missing = [f.name for f in files if not f.exists()]
    if missing:
        raise RepoError(f"{cache} lacks {', '.join(missing[:3])}: run `deploy/testbed/package_repo.py fetch`")
    return record, files


# ------------------------------------------------------------------------------------- stand-in packages


def boot_copies() -> dict[str, str]:
    """Directories a compute node's boot copies (installed -> loaded): the driver stand-in's files."""
    return {DRIVER_INSTALLED: DRIVER_LOADED}


def standin_files(name: str, version: str) -> dict[str, str]:
    """Path (no leading /) -> text of the files the STAND-IN NAME=VERSION installs: its VERSION, and for the
    driver the files the stand-in nvidia-smi reads once loaded (VERSION as the driver prints it, FAULTS if broken)."""
    out = {f"usr/share/reconciler-testbed-standins/{name}/VERSION": version + "\n"}
    if name == "nvidia-driver-standin":
        out[f"{DRIVER_INSTALLED.lstrip('/')}/VERSION"] = version.split("-", 1)[0] + "\n"
        if version == STANDIN_BROKEN:
            out[f"{DRIVER_INSTALLED.lstrip('/')}/FAULTS"] = BROKEN_FAULTS
    return out


def standin_deb(out: Path, name: str, version: str, depends: str | None) -> Path:
    """Build the STAND-IN .deb NAME=VERSION (standin_files) with dpkg-deb into OUT."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        for rel, text in standin_files(name, version).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        control = (f"Package: {name}\nVersion: {version}\nArchitecture: all\nSection: misc\nPriority: optional\n"
                   "Maintainer: reconciler testbed <testbed@localhost>\n"
                   + (f"Depends: {depends} (= {version})\n" if depends else "")
                   + f"Description: STAND-IN for {name.removesuffix('-standin')} (reconciler testbed; installs "
                     "small files, no NVIDIA software)\n")
        (root / "DEBIAN/control").write_text(control)
        target = out / f"{name}_{version}_all.deb"
        _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(target)])
    return target


def standin_rpm(out: Path, name: str, version: str, requires: str | None) -> Path:
    """Build the STAND-IN noarch rpm NAME-VERSION (standin_files, AutoReqProv off) with rpmbuild into OUT."""
    ver, rel = version.rsplit("-", 1)
    installed = standin_files(name, version)
    install = "\n".join(f"mkdir -p %{{buildroot}}/{Path(p).parent}\nprintf '%s' '{t}' > %{{buildroot}}/{p}"
                        for p, t in installed.items())
    listed = "\n".join(f"/{p}" for p in installed)
    spec = f"""Name: {name}
Version: {ver}
Release: {rel}
Summary: STAND-IN for {name.removesuffix('-standin')} (reconciler testbed; no NVIDIA software)
License: none
BuildArch: noarch
AutoReqProv: no
{f'Requires: {requires} = {ver}-{rel}' if requires else ''}

%description
STAND-IN package built by the reconciler testbed: installs small files and nothing else.

%install
{install}

%files
{listed}
"""
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        (top / f"{name}.spec").write_text(spec)
        _run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}", "--define", "_binary_payload w9.gzdio",
              "--define", f"_dbpath {top}/rpmdb", str(top / f"{name}.spec")])
        built = next((top / "RPMS" / "noarch").glob("*.rpm"))
        target = out / built.name
        shutil.move(built, target)
    return target


# ------------------------------------------------------------------------------------- the repository


def _repo_key(debs: list[Path]) -> str:
    """Content key of a cached repository: this module's source and the real packages' names and sizes."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for f in debs:
        h.update(f"{f.name} {f.stat().st_size}\n".encode())
    return h.hexdigest()[:16]


def cached_repo(cache_base: Path) -> Path:
    """Unsigned repository tree (deb/ flat apt repository, rpm/ with repodata), built once per content key
    under CACHE_BASE; a concurrent `up` sees a whole tree or none (built aside, then renamed)."""
    record, debs = fetched_debs()
    tree = cache_base / f"package-repo-{_repo_key(debs)}"
    if (tree / "manifest-part.json").exists():
        return tree
    cache_base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache_base, prefix=".package-repo-"))
    try:
        pool = tmp / "deb" / "pool"
        pool.mkdir(parents=True)
        rpms = tmp / "rpm"
        rpms.mkdir()
        for f in debs:
            shutil.copy2(f, pool / f.name)
        for name, dep in STANDINS.items():
            for version in [*STANDIN_VERSIONS, STANDIN_BROKEN]:
                standin_deb(pool, name, version, dep)
                standin_rpm(rpms, name, version, dep)
        for name, versions in EXTRA_STANDINS.items():
            (tmp / EXTRA / "deb" / "pool").mkdir(parents=True, exist_ok=True)
            (tmp / EXTRA / "rpm").mkdir(parents=True, exist_ok=True)
            for version in versions:
                standin_deb(tmp / EXTRA / "deb" / "pool", name, version, None)
                standin_rpm(tmp / EXTRA / "rpm", name, version, None)  # signed and indexed per testbed (build)
        for deb_dir in (tmp / "deb", tmp / EXTRA / "deb"):
            _index_debs(deb_dir)
        _run(["createrepo_c", "--quiet", "--no-database", str(rpms)])
        broken = {n: STANDIN_BROKEN for n in STANDINS}
        part = {"deb": {"real": record["packages"], "versioned": record["versioned"],
                        "standin": {n: list(STANDIN_VERSIONS) for n in STANDINS}, "standin_broken": broken},
                "rpm": {"real": {}, "standin": {n: list(STANDIN_VERSIONS) for n in STANDINS},
                        "standin_broken": broken},
                "slurm": {"releases": record["slurm"]["releases"], "packages": record["slurm"]["packages"],
                          "files": record["slurm"]["files"]},
                "standin_driver": {"installed": DRIVER_INSTALLED, "loaded": DRIVER_LOADED,
                                   "broken_faults": BROKEN_FAULTS.strip()},
                EXTRA: {"deb": {"standin": EXTRA_STANDINS}, "rpm": {"standin": EXTRA_STANDINS}}}
        (tmp / "manifest-part.json").write_text(json.dumps(part, indent=2) + "\n")
        try:
            os.rename(tmp, tree)
        except OSError:  # another `up` built it first
            if not (tree / "manifest-part.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tree


def _index_debs(deb_dir: Path) -> None:
    """Packages and Packages.gz of the flat apt repository DEB_DIR (its pool/)."""
    packages = _run(["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"], cwd=deb_dir)
    (deb_dir / "Packages").write_text(packages)
    (deb_dir / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))


def release_file(deb_dir: Path) -> str:
    """Release of the flat apt repository DEB_DIR (SHA256 of its Packages indexes)."""
    lines = ["Origin: reconciler-testbed", "Label: reconciler-testbed", "Suite: testbed", "Codename: testbed",
             f"Date: {formatdate(usegmt=True)}", "Architectures: all amd64",
             "Description: reconciler testbed packages (real Debian packages and stand-ins)", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (deb_dir / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def sign(deb_dir: Path, rpm_dir: Path | None = None) -> bytes:
    """Sign DEB_DIR's Release (InRelease and Release.gpg) with a throwaway key, ed25519 (binary public key
    returned); with RPM_DIR, an RSA key (rpm 4.18 signs with it) that also signs RPM_DIR's rpms, indexed after
    (armored public key returned)."""
    with tempfile.TemporaryDirectory(prefix="rtb-gpg-") as home:
        env = {**os.environ, "GNUPGHOME": home}
        gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        try:
            _run([*gpg, "--quick-gen-key", "reconciler testbed <testbed@localhost>",
                  "ed25519" if rpm_dir is None else "rsa2048", "sign", "never"], env=env)
            release = str(deb_dir / "Release")
            _run([*gpg, "--clearsign", "-o", str(deb_dir / "InRelease"), release], env=env)
            _run([*gpg, "--detach-sign", "-o", str(deb_dir / "Release.gpg"), release], env=env)
            if rpm_dir is not None:
                _run(["rpmsign", "--addsign", "--define", "_gpg_name reconciler testbed", "--define",
                      f"_gpg_path {home}", "--define", "__gpg /usr/bin/gpg",
                      *[str(f) for f in sorted(rpm_dir.glob("*.rpm"))]], env=env)
                _run(["createrepo_c", "--quiet", "--no-database", str(rpm_dir)])
            armor = ["--armor"] if rpm_dir is not None else []
            key = subprocess.run(["gpg", "--batch", "--export", *armor], env=env, capture_output=True,
                                 check=True).stdout
        finally:  # the agent gpg started for this home must not outlive it
            subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, capture_output=True)
    return key


@dataclass
class Repository:
    """What the nodes need of a built repository."""

    url: str  # http://ctl:PORT
    public_key: bytes
    manifest: dict = field(default_factory=dict)


def build(state: Path, ctl_upper: Path, ctl_host: str, cache_base: Path, lower: Path = Path("/")) -> Repository:
    """Put the repository into ctl's upper layer (SERVED), sign it, write <state>/packages/manifest.json (what is
    installed: read from LOWER, the nodes' lower layer)."""
    tree = cached_repo(cache_base)
    served = ctl_upper / SERVED
    if served.exists():
        shutil.rmtree(served)
    served.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tree, served, ignore=shutil.ignore_patterns("manifest-part.json"))
    (served / "deb" / "Release").write_text(release_file(served / "deb"))
    key = sign(served / "deb")
    (served / EXTRA / "deb" / "Release").write_text(release_file(served / EXTRA / "deb"))
    extra_key = sign(served / EXTRA / "deb", served / EXTRA / "rpm")
    url = f"http://{ctl_host}:{PORT}"
    manifest = json.loads((tree / "manifest-part.json").read_text())
    manifest["url"] = url
    manifest["deb"].update(url=f"{url}/deb", signed_by=KEYRING,
                           installed=installed_on_host(manifest["deb"]["real"], lower))
    manifest["slurm"]["installed"] = installed_on_host(manifest["slurm"]["packages"], lower)
    manifest["rpm"]["url"] = f"{url}/rpm"
    manifest["served_from"] = f"ctl:/{SERVED}"
    out = state / "packages"
    manifest[EXTRA]["deb"]["url"] = f"{url}/{EXTRA}/deb"
    manifest[EXTRA]["rpm"]["url"] = f"{url}/{EXTRA}/rpm"
    manifest[EXTRA]["key"] = str(out / EXTRA_KEY)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reconciler-testbed.gpg").write_bytes(key)
    (out / EXTRA_KEY).write_bytes(extra_key)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return Repository(url=url, public_key=key, manifest=manifest)


def installed_on_host(packages: dict[str, list[str]] | list[str], lower: Path = Path("/")) -> dict[str, str | None]:
    """package -> version dpkg says LOWER has (every node starts with it: LOWER is their lower layer)."""
    out: dict[str, str | None] = {}
    for name in packages:
        proc = subprocess.run(["dpkg-query", f"--admindir={lower / 'var/lib/dpkg'}", "-W", "-f",
                               "${db:Status-Abbrev}|${Version}", name],
                              capture_output=True, text=True)
        status, _, version = proc.stdout.partition("|")
        out[name] = version if proc.returncode == 0 and status.startswith("ii") else None
    return out


# ------------------------------------------------------------------------------------- the nodes


@dataclass
class NodeLayer:
    """Upper-layer edits of one node: files to write, host paths to hide, directories to make opaque."""

    files: dict[str, tuple[bytes, int]]
    hide: list[str]
    opaque: list[str]
    mirror_dirs: list[str]  # made with the host's owner and mode, inside the opaque directories


# dnf as packaged by Debian: no distribution package gives $releasever (set in vars), Debian's rpm keeps its
# database in ~/.rpmdb (moved to /var/lib/rpm, where RPM-based systems have it), and the host's dnf.conf turns
# on gpgcheck (the stand-in rpms are unsigned: the repository is the testbed's own, served on its network only).
DNF_CONF = """# written by deploy/testbed (--packages): Debian's dnf against the testbed's rpm repository on ctl
[main]
gpgcheck=False
installonly_limit=3
clean_requirements_on_remove=True
best=False
skip_if_unavailable=False
reposdir=/etc/yum.repos.d
cachedir=/var/cache/dnf
"""
RPM_MACROS = "# written by deploy/testbed (--packages): the rpm database where RPM-based systems have it\n" \
             "%_dbpath /var/lib/rpm\n"


def node_layer(repo: Repository, lower: Path = Path("/")) -> NodeLayer:
    """The apt and dnf configuration of a node: the testbed repository as the only source."""
    sources = (f"# written by deploy/testbed (--packages): the testbed's repository on ctl, the only source\n"
               f"Types: deb\nURIs: {repo.url}/deb/\nSuites: ./\nSigned-By: {KEYRING}\n")
    yum = (f"# written by deploy/testbed (--packages)\n[reconciler-testbed]\n"
           f"name=reconciler testbed packages (stand-ins), served by ctl\nbaseurl={repo.url}/rpm/\n"
           "enabled=1\ngpgcheck=0\nrepo_gpgcheck=0\nmetadata_expire=0\n")
    files = {"etc/apt/sources.list.d/reconciler-testbed.sources": (sources.encode(), 0o644),
             KEYRING.lstrip("/"): (repo.public_key, 0o644),
             "etc/yum.repos.d/reconciler-testbed.repo": (yum.encode(), 0o644),
             "etc/dnf/dnf.conf": (DNF_CONF.encode(), 0o644),
             "etc/dnf/vars/releasever": (b"12\n", 0o644),
             "etc/rpm/macros.reconciler-testbed": (RPM_MACROS.encode(), 0o644),
             # dnf-plugins-core's `local` plugin adds a repository `_dnf_local` of every installed rpm: off
             "etc/dnf/plugins/local.conf": (b"# written by deploy/testbed (--packages)\n[main]\nenabled = false\n",
                                            0o644)}
    hide = [p for p in ("etc/apt/sources.list",) if os.path.lexists(lower / p)]
    return NodeLayer(files=files, hide=hide,
                     opaque=["etc/apt/sources.list.d", "var/lib/apt/lists", "var/cache/apt", "etc/yum.repos.d"],
                     mirror_dirs=["var/lib/apt/lists/partial", "var/cache/apt/archives/partial"])


def http_command(ip: str) -> str:
    """ctl's supervisord command serving SERVED on the testbed network (IP only)."""
    return f"/usr/bin/python3 -I -m http.server {PORT} --bind {ip} --directory /{SERVED}"


def apt_update_all(nodes: list[str], run: Callable[[str, str, float], subprocess.CompletedProcess[str]]) -> None:
    """`apt-get update` on every node in parallel (RUN(node, command, timeout)); RepoError naming the failures."""
    cmd = "DEBIAN_FRONTEND=noninteractive apt-get update -q -o APT::Update::Error-Mode=any"

    def one(node: str) -> str:
        proc = run(node, cmd, APT_TIMEOUT)
        return "" if proc.returncode == 0 else f"{node}: {(proc.stderr or proc.stdout).strip()[-400:]}"

    with ThreadPoolExecutor(max_workers=8) as pool:
        failed = [f for f in pool.map(one, nodes) if f]
    if failed:
        raise RepoError("apt-get update failed on " + "; ".join(failed))


def apt_update_when_up(nodes: list[str], ready: Callable[[], bool], stop: threading.Event,
                       run: Callable[[str, str, float], subprocess.CompletedProcess[str]]) -> None:
    """Wait until READY() (every node's daemons listening, ctl's HTTP server too), then apt_update_all; give up
    quietly once STOP is set (the `up` failed). Runs beside the wait for Slurm, which takes longer."""
    while not ready():
        if stop.wait(0.05):
            return
    apt_update_all(nodes, run)


def main(argv: list[str]) -> int:
    """`package_repo.py fetch`: download the real Debian packages into DEB_CACHE (what `testbed deps` does)."""
    if argv != ["fetch"]:
        print("usage: package_repo.py fetch", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        fetched = fetch_real_debs()
    except RepoError as e:
        print(f"package_repo: error: {e}", file=sys.stderr)
        return 1
    for name, versions in fetched.items():
        print(f"{name}: {', '.join(versions)}")
    print(f"in {DEB_CACHE} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
