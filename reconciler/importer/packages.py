"""`reconciler import --packages PATTERN,...`: adopt the installed versions of the packages a pattern names.

Read in the import's one round trip per node: a snippet run inside the fact script reads /var/lib/dpkg/status
(apt nodes) or `rpm -qa` (dnf nodes) and sends back only the packages whose name matches a pattern. Nodes with
the same name -> (version, hold) map share one `packages:` entry with a folded hostlist; versions are exact, a
held package gets `hold: true`, so the first plan after the import is a no-op.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from reconciler.common import hostlist
from reconciler.facts.packages import read_dpkg_status

DPKG_STATUS = "/var/lib/dpkg/status"
RPM = "rpm"
VERSIONLOCK = "/etc/dnf/plugins/versionlock.list"
# A Debian or RPM package name, with the glob characters fnmatch knows.
_PATTERN = re.compile(r"[A-Za-z0-9.+_~*?\[\]-]+")
# The dpkg state of an installed package, as the packages driver reads it (`triggers-*` and `half-*` are not:
# adopting them would make the first plan an install).
_INSTALLED = ("installed",)
_ABSENT = ("not-installed", "config-files")

# Runs inside the fact script (python3 >= 3.8, stdlib only; `run`, `env`, `timeout` given; sets `stdout`).
# Lines: `manager apt|dnf|none`, then `pkg NAME VERSION STATE ARCH`, tab-separated; `lock PATTERN` (dnf's
# versionlock list); `error TEXT`. apt: a line `dpkg`, then the status file's stanzas of the matching packages as
# they are, read by the facts' reader (reconciler/facts/packages.py, read_dpkg_status): one reader of the format.
_SNIPPET = r'''
import fnmatch
def _wanted(name):
    for p in PATTERNS:
        if fnmatch.fnmatchcase(name, p):
            return True
    return False
lines = []
try:
    fh = open(DPKG_STATUS, "rb")
except OSError:
    fh = None
if fh is not None:
    lines.append("manager\tapt")
    with fh:
        text = fh.read().decode("utf-8", "replace")
    kept = []
    for stanza in text.split("\n\n"):
        for line in stanza.split("\n"):
            if line.startswith("Package:"):
                if _wanted(line[8:].strip()):
                    kept.append(stanza.strip("\n"))
                break
    lines.append("dpkg\n" + "\n\n".join(kept))
else:
    rc, out, err = run(RPM + " -qa --qf '%{NAME}\\t%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\\t%{ARCH}\\n'",
                       timeout, env)
    if rc is None or rc == 127:
        lines.append("manager\tnone")
    elif rc != 0:
        lines.append("manager\tdnf")
        lines.append("error\trpm -qa exited %s: %s" % (rc, err.strip()[-300:].replace("\n", " ")))
    else:
        lines.append("manager\tdnf")
        for row in out.splitlines():
            parts = row.split("\t")
            if len(parts) == 3 and _wanted(parts[0]):
                lines.append("pkg\t%s\t%s\tinstalled\t%s" % (parts[0], parts[1], parts[2]))
        try:
            with open(VERSIONLOCK) as fh:
                for row in fh:
                    row = row.strip()
                    if row and not row.startswith("#"):
                        lines.append("lock\t" + row)
        except OSError:
            pass
stdout = "\n".join(lines) + "\n"
'''


class PatternError(ValueError):
    """A --packages value that is not a list of package names or patterns."""


def parse_patterns(text: str) -> list[str]:
    """The comma-separated patterns of --packages, each checked (a PatternError says which one is wrong)."""
    patterns = [p.strip() for p in text.split(",")]
    if not any(patterns):
        raise PatternError("--packages: no pattern given (e.g. --packages 'nvidia-*,slurm*')")
    for pattern in patterns:
        if not pattern:
            raise PatternError(f"--packages {text!r}: an empty pattern between commas")
        if not _PATTERN.fullmatch(pattern):
            raise PatternError(f"--packages: {pattern!r} is not a package name or pattern (letters, digits, "
                               ". + - _ ~ and the glob characters * ? [ ])")
        if pattern.count("[") != pattern.count("]"):
            raise PatternError(f"--packages: {pattern!r} has an unclosed [ ]")
    return list(dict.fromkeys(patterns))


def snippet(patterns: list[str], dpkg_status: str = DPKG_STATUS, rpm: str = RPM,
            versionlock: str = VERSIONLOCK) -> str:
    """The fact-script snippet answering which packages matching PATTERNS are installed (paths for tests)."""
    return (f"PATTERNS = {patterns!r}\nDPKG_STATUS = {dpkg_status!r}\nRPM = {rpm!r}\n"
            f"VERSIONLOCK = {versionlock!r}\n" + _SNIPPET)


@dataclass(frozen=True)
class Installed:
    """One installed package as adopted: its exact version, and whether it is held."""

    version: str
    hold: bool = False


@dataclass
class NodePackages:
    """What one node answered: its package manager, the matching packages, what could not be adopted."""

    manager: str | None = None
    packages: dict[str, Installed] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _rpm_locked(name: str, version: str, arch: str, locks: list[str]) -> bool:
    """Whether dnf's versionlock list holds this package (entries are NAME-[EPOCH:]VERSION-RELEASE[.ARCH] globs)."""
    plain = version.split(":", 1)[1] if ":" in version else version
    epoch = version.split(":", 1)[0] if ":" in version else "0"
    forms = [f"{name}-{epoch}:{plain}.{arch}", f"{name}-{plain}.{arch}", f"{name}-{epoch}:{plain}", f"{name}-{plain}"]
    return any(lock == name or any(fnmatchcase(form, lock) for form in forms)
               for lock in locks if not lock.startswith("!"))


def parse(stdout: str) -> NodePackages:
    """The snippet's answer as a NodePackages."""
    out = NodePackages()
    seen: dict[str, set[str]] = {}
    held: dict[str, bool] = {}
    arches: dict[str, str] = {}
    locks: list[str] = []
    head, dpkg, status = stdout.partition("\ndpkg\n")
    rows = [(e.name, e.version, e.state, e.held, e.arch) for e in read_dpkg_status(status)] if dpkg else []
    for line in head.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "manager":
            out.manager = None if rest == "none" else rest
        elif kind == "error":
            out.problems.append(rest)
        elif kind == "lock":
            locks.append(rest)
        elif kind == "pkg":  # rpm's
            name, version, _, arch = (rest.split("\t") + ["", "", ""])[:4]
            rows.append((name, version, "installed", False, arch))
    for name, version, state, hold, arch in rows:
        if state in _ABSENT:
            continue
        if state not in _INSTALLED:
            out.problems.append(f"{name} {version}: dpkg state {state!r} (not fully installed), not adopted")
            continue
        seen.setdefault(name, set()).add(version)
        held[name] = held.get(name, False) or hold
        arches[name] = arch
    for name, versions in sorted(seen.items()):
        if len(versions) > 1:
            out.problems.append(f"{name}: installed in {len(versions)} versions ({', '.join(sorted(versions))}), "
                                "not adopted (packages: keeps one version of a name)")
            continue
        [version] = versions
        hold = held[name] or (out.manager == "dnf" and _rpm_locked(name, version, arches[name], locks))
        out.packages[name] = Installed(version, hold)
    return out


def _value(installed: Installed) -> object:
    """A package's value in `packages:`: the exact version, or {version, hold: true} when held."""
    version = DoubleQuotedScalarString(installed.version)
    if not installed.hold:
        return version
    value = CommentedMap(version=version, hold=True)
    value.fa.set_flow_style()
    return value


def packages_doc(answers: Mapping[str, NodePackages], patterns: list[str],
                 warnings: list[str]) -> CommentedMap | None:
    """The `packages:` document: one entry per distinct name -> (version, hold) map, its nodes folded.

    Nodes where nothing matched get no entry; a pattern no node matched, and what could not be adopted, are
    warnings. None when no node has a matching package.
    """
    groups: dict[tuple[tuple[str, Installed], ...], list[str]] = {}
    for node, answer in answers.items():
        warnings.extend(f"{node}: packages: {problem}" for problem in answer.problems)
        if answer.manager is None:
            warnings.append(f"{node}: packages: neither dpkg nor rpm found, no packages adopted")
            continue
        if answer.packages:
            groups.setdefault(tuple(sorted(answer.packages.items())), []).append(node)
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for a in answers.values() for name in a.packages):
            warnings.append(f"packages: no node has a package matching {pattern!r}")
    if not groups:
        return None
    entries = CommentedSeq()
    for key, nodes in sorted(groups.items(), key=lambda item: (-len(item[1]), item[1][0])):
        entries.append(CommentedMap(nodes=hostlist.compress(nodes),
                                    packages=CommentedMap((name, _value(inst)) for name, inst in key)))
    doc = CommentedMap(packages=entries)
    doc.yaml_set_start_comment(
        f"Packages adopted by `reconciler import --packages '{','.join(patterns)}'`: the exact versions installed,\n"
        "`hold: true` where the package was held. Nodes with the same packages share an entry. Widen a version to\n"
        "a glob (570.86.*) or set allow_downgrade as you need; packages not named here are left alone.")
    return doc
