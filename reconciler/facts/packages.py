"""Package facts: the fact script's snippet (in the one round trip per node) and the parsers of its answer.

apt: /var/lib/dpkg/status is read for the named packages only (version, status, the `hold` selection that
`apt-mark hold` sets); `apt-cache madison` runs only for packages whose installed state does not already satisfy
the desired one. dnf: `rpm -q` for the named packages; the versionlock plugin's lock list (the file, read, not
`dnf versionlock list`, which refreshes the repositories' cache) only when a hold is managed or a package must
change; `dnf --cacheonly list --showduplicates` only for packages that must change. A converged apt
node spawns no process at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

FACTS_KEY = "packages"  # the snippet's name, and kept as a PackageFacts per node
SEP = "\x1e"  # starts each section of the snippet's answer (never in dpkg, rpm or dnf output)
Kind = Literal["present", "absent", "exact", "glob"]
NO_MATCH = "No matching Packages to list"  # dnf 4's stderr when no repository offers any of the names

_SNIPPET = r"""
import os
W = %(want)r
specs = W["specs"]
backend = W["backend"]
if backend is None:
    q = os.path.exists("/usr/bin/dpkg-query") or os.path.exists("/bin/dpkg-query")
    if q and os.path.exists("/var/lib/dpkg/status"):
        backend = "apt"
    elif os.path.exists("/usr/bin/rpm") or os.path.exists("/bin/rpm"):
        backend = "dnf"
    else:
        backend = "none"
parts = ["backend " + backend]
names = " ".join(specs)
def ok(name, version):
    kind, value = specs[name]
    if kind == "absent": return version is None
    if version is None: return False
    if kind == "present": return True
    if kind == "exact": return version == value or (backend == "dnf" and version.startswith(value + "-"))
    import fnmatch
    return fnmatch.fnmatchcase(version, value)
todo = []
if backend == "apt":
    try:
        data = "\n" + open("/var/lib/dpkg/status", encoding="utf-8", errors="replace").read()
    except OSError as exc:
        data = "\n"
        parts.append("error\n" + str(exc))
    found = []
    for name in specs:
        key, at, version = "\nPackage: " + name + "\n", 0, None
        while True:
            at = data.find(key, at)
            if at < 0: break
            end = data.find("\n\n", at + 1)
            stanza = data[at + 1:end if end >= 0 else len(data)]
            found.append(stanza)
            status = vers = ""
            for line in stanza.split("\n"):
                if line.startswith("Status: "): status = line[8:]
                elif line.startswith("Version: "): vers = line[9:]
            if status.endswith(" installed"): version = vers
            at += 1
        if not ok(name, version) and specs[name][0] != "absent": todo.append(name)
    parts.append("status\n" + "\n\n".join(found))
    if todo:
        rc, so, se = run("apt-cache madison " + " ".join(todo), timeout, env)
        parts.append("madison %%s\n%%s" %% (rc, so if rc == 0 else se[-2000:]))
elif backend == "dnf":
    qf = "%%{NAME}\\t%%|EPOCH?{%%{EPOCH}:}:{}|%%{VERSION}-%%{RELEASE}\\t%%{ARCH}\\n"
    rc, so, se = run("rpm -q --qf '" + qf + "' " + names, timeout, env)
    parts.append("rpm %%s\n%%s" %% (rc, so))
    have = {}
    for line in so.split("\n"):
        f = line.split("\t")
        if len(f) == 3: have[f[0]] = f[1]
    todo = [n for n in specs if not ok(n, have.get(n)) and specs[n][0] != "absent"]
    change = todo or [n for n in specs if not ok(n, have.get(n))]
    if W["holds"] or change:
        # the lock list itself, not `dnf versionlock list` (which loads the repositories and refreshes their cache)
        conf, path = "/etc/dnf/plugins/versionlock.conf", "/etc/dnf/plugins/versionlock.list"
        try:
            for line in open(conf, encoding="utf-8", errors="replace"):
                k, _, v = line.partition("=")
                if k.strip() == "locklist" and v.strip(): path = v.strip()
            try:
                parts.append("versionlock 0\n" + open(path, encoding="utf-8", errors="replace").read())
            except FileNotFoundError:
                parts.append("versionlock 0\n")
        except OSError as exc:
            if W["holds"] or not isinstance(exc, FileNotFoundError):
                parts.append("versionlock 1\n%%s: %%s" %% (getattr(exc, "filename", None) or conf, exc.strerror))
    if todo:
        rc, so, se = run("dnf -q --cacheonly list --showduplicates " + " ".join(todo), timeout, env)
        parts.append("list %%s\n%%s" %% (rc, so if rc == 0 else se[-2000:]))
if W["cache"]:
    # the metadata's age, by the node's clock: the newest of the stamps a refresh leaves (CACHE_STAMPS)
    import time
    times = []
    for stamp in W["stamps"].get(backend, []):
        try: times.append(os.stat(stamp).st_mtime)
        except OSError: pass
    parts.append("cache\n" + ("%%d" %% max(0, time.time() - max(times)) if times else "none"))
parts.append("asked\n" + " ".join(todo))
stdout = "\x1e".join(parts)
"""


# What a metadata refresh leaves behind (drivers/package_refresh.py touches the first of each after a refresh;
# apt-get update itself renames new index files into /var/lib/apt/lists, dnf's timer touches last_makecache).
CACHE_STAMPS = {"apt": ["/var/lib/apt/periodic/update-success-stamp", "/var/lib/apt/lists"],
                "dnf": ["/var/cache/dnf/last_makecache"]}


def snippet(backend: str | None, specs: dict[str, tuple[Kind, str]], holds: bool, cache: bool = False) -> str:
    """The fact script's snippet (stdlib, Python 3.8) for these package specs (name -> (kind, value)); CACHE:
    also the age of the package metadata (a stat, nothing refreshed)."""
    return _SNIPPET % {"want": {"backend": backend, "specs": specs, "holds": holds, "cache": cache,
                                "stamps": CACHE_STAMPS if cache else {}}}


@dataclass
class Installed:
    """One installed package: its version (None: known to dpkg but not installed), held or not, dpkg's status."""

    version: str | None
    held: bool = False
    status: str = ""


@dataclass
class PackageFacts:
    """What the snippet found on one node."""

    backend: str
    installed: dict[str, Installed] = field(default_factory=dict)
    candidates: dict[str, list[str]] = field(default_factory=dict)  # only for the packages in `asked`
    asked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # the offered versions could not be read from the metadata cache (dnf without a cache for some repository):
    # an error unless a refresh runs first (drivers/packages.py)
    cache_error: str | None = None
    cache_age: int | None = None  # seconds since the metadata was last refreshed (None: never, or not asked)
    cache_asked: bool = False

    def to_json(self) -> dict[str, Any]:
        """Plain values (ClusterFacts.kept's JSON form)."""
        return {"backend": self.backend, "asked": self.asked, "errors": self.errors, "candidates": self.candidates,
                "installed": {n: [i.version, i.held, i.status] for n, i in self.installed.items()},
                "cache_error": self.cache_error, "cache_age": self.cache_age, "cache_asked": self.cache_asked}


@dataclass(frozen=True)
class DpkgEntry:
    """One stanza of dpkg's status file: the package, its version and architecture, and the Status words
    (selection, flag, state: `hold ok installed`)."""

    name: str
    version: str
    arch: str
    words: tuple[str, ...]

    @property
    def state(self) -> str:
        """dpkg's package state (`installed`, `config-files`, `half-configured`, ...; '' when absent)."""
        return self.words[-1] if self.words else ""

    @property
    def held(self) -> bool:
        """The selection is `hold` (`apt-mark hold`)."""
        return self.words[:1] == ("hold",)


def read_dpkg_status(text: str) -> list[DpkgEntry]:
    """Every stanza of a dpkg status file (or of the stanzas a snippet sent back), in order: the one reader of
    the format, for the facts and the import. Fields are `Key: value` lines; a line starting with a space or a tab
    continues the previous field (deb-control(5)) and is skipped; a stanza without Package is ignored."""
    out = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.split("\n"):
            if line[:1] in (" ", "\t"):
                continue
            key, sep, value = line.partition(":")
            if sep:
                fields[key] = value.strip()
        if fields.get("Package"):
            out.append(DpkgEntry(fields["Package"], fields.get("Version", ""), fields.get("Architecture", ""),
                                 tuple(fields.get("Status", "").split())))
    return out


def parse_dpkg_status(text: str, names: set[str] | None = None) -> dict[str, Installed]:
    """Stanzas of /var/lib/dpkg/status: the installed one of each package (else a not-installed entry) with
    `held` from the selection word (`hold ok installed`)."""
    out: dict[str, Installed] = {}
    for entry in read_dpkg_status(text):
        if names is not None and entry.name not in names:
            continue
        installed = len(entry.words) == 3 and entry.state == "installed"
        item = Installed(entry.version if installed else None, entry.held, " ".join(entry.words))
        if entry.name not in out or (item.version is not None and out[entry.name].version is None):
            out[entry.name] = item
    return out


def parse_madison(text: str) -> dict[str, list[str]]:
    """`apt-cache madison` lines (`  tzdata | 2026b-0+deb12u1 | http://... Packages`): name -> versions."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 3 and fields[0] and fields[1] and not fields[2].endswith("Sources"):
            versions = out.setdefault(fields[0], [])
            if fields[1] not in versions:
                versions.append(fields[1])
    return out


def parse_rpm_q(text: str) -> dict[str, Installed]:
    """`rpm -q --qf 'NAME\\t[EPOCH:]VERSION-RELEASE\\tARCH\\n'` lines; `package X is not installed` is skipped."""
    out: dict[str, Installed] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0] and fields[1]:
            out.setdefault(fields[0], Installed(fields[1], False, "installed"))
    return out


def parse_versionlock(text: str) -> set[str]:
    """`dnf versionlock list` lines (`nvidia-driver-standin-0:550.127.05-1.*`): the locked names (an exclude,
    `!name-...`, is no hold)."""
    names: set[str] = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("!", "#")) or line.count("-") < 2:
            continue
        names.add(line.rsplit("-", 2)[0])
    return names


def parse_dnf_list(text: str) -> dict[str, list[str]]:
    """`dnf list --showduplicates` lines (`name.arch  [E:]V-R  repo`): name -> the versions repositories offer
    (the `Installed Packages` section and @-repositories are not offers)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 3 or fields[2].startswith("@") or "." not in fields[0]:
            continue
        name = fields[0].rsplit(".", 1)[0]
        versions = out.setdefault(name, [])
        if fields[1] not in versions:
            versions.append(fields[1])
    return out


def _sections(stdout: str) -> dict[str, tuple[str, str]]:
    """The answer's sections: word -> (rest of the header line, body)."""
    out: dict[str, tuple[str, str]] = {}
    for part in stdout.split(SEP):
        head, _, body = part.partition("\n")
        word, _, rest = head.partition(" ")
        out[word] = (rest, body)
    return out


def parse_answer(answer: dict[str, Any] | None, names: set[str]) -> PackageFacts:
    """The snippet's answer (`{"rc", "stdout", "stderr"}`) as PackageFacts; errors are kept, not raised."""
    if not answer or answer.get("rc") != 0:
        why = (answer or {}).get("stderr") or "no answer"
        return PackageFacts(backend="unknown", errors=[f"package facts failed: {why}"])
    parts = _sections(str(answer.get("stdout", "")))
    facts = PackageFacts(backend=parts.get("backend", ("unknown", ""))[0] or "unknown",
                         asked=[n for n in parts.get("asked", ("", ""))[1].split() if n in names])
    if "error" in parts:
        facts.errors.append(f"reading /var/lib/dpkg/status: {parts['error'][1]}")
    if facts.backend == "apt":
        facts.installed = parse_dpkg_status(parts.get("status", ("", ""))[1], names)
        rc, body = parts.get("madison", ("0", ""))
        if rc != "0":
            facts.errors.append(f"apt-cache madison failed: {body.strip()[-300:]}")
        facts.candidates = parse_madison(body) if rc == "0" else {}
    elif facts.backend == "dnf":
        facts.installed = {n: i for n, i in parse_rpm_q(parts.get("rpm", ("", ""))[1]).items() if n in names}
        if "versionlock" in parts:
            rc, body = parts["versionlock"]
            if rc != "0":
                facts.errors.append(f"reading dnf's versionlock list failed (no versionlock plugin? it is in "
                                    f"dnf-plugins-core): {body.strip()[-300:]}")
            for name in parse_versionlock(body) if rc == "0" else set():
                if name in facts.installed:
                    facts.installed[name].held = True
        if "list" in parts:
            rc, body = parts["list"]
            # dnf exits 1 both when none of the names is offered (then no candidates, and the plan says so) and
            # when it has no metadata cache to read (`--cacheonly`): only the first is an answer
            if rc != "0" and not (rc == "1" and NO_MATCH in body):
                facts.cache_error = f"dnf list failed (no metadata cache? run `dnf makecache`): {body.strip()[-300:]}"
            facts.candidates = parse_dnf_list(body) if rc == "0" else {}
    elif facts.backend == "none":
        facts.errors.append("neither dpkg-query nor rpm found on the node: no package manager to use")
    if "cache" in parts:
        facts.cache_asked = True
        age = parts["cache"][1].strip()
        facts.cache_age = int(age) if age.isdigit() else None
    for name in facts.asked:
        facts.candidates.setdefault(name, [])
    return facts
