"""Package versions: Debian's order (dpkg's verrevcmp), rpm's (rpmvercmp), and version globs (570.86.*)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from functools import cmp_to_key
from typing import Literal

Backend = Literal["apt", "dnf"]
GLOB_CHARS = frozenset("*?[")
# A version as dpkg and rpm write them ([epoch:]upstream[-revision]; rpm also `_` and `^`), or a glob of one.
VERSION_TEXT = re.compile(r"^[A-Za-z0-9.+~:^_*?\[\]!-]{1,128}$")


def _order(c: str) -> int:
    """dpkg's weight of one character of a non-digit run: `~` first, then end of text, letters, the rest."""
    if not c or c.isdigit():
        return 0
    if c.isascii() and c.isalpha():
        return ord(c)
    if c == "~":
        return -1
    return ord(c) + 256


def verrevcmp(a: str, b: str) -> int:
    """dpkg's comparison of two upstream versions or revisions (lib/dpkg/version.c): <0, 0 or >0."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac, bc = _order(a[i] if i < len(a) else ""), _order(b[j] if j < len(b) else "")
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and j < len(b) and a[i].isdigit() and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_deb(version: str) -> tuple[int, str, str]:
    epoch, _, rest = version.partition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch) if epoch.isdigit() else 0, upstream, revision


def deb_compare(a: str, b: str) -> int:
    """Compare two Debian versions as `dpkg --compare-versions` does: -1, 0 or 1."""
    ea, ua, ra = _split_deb(a)
    eb, ub, rb = _split_deb(b)
    if ea != eb:
        return -1 if ea < eb else 1
    result = verrevcmp(ua, ub) or verrevcmp(ra, rb)
    return (result > 0) - (result < 0)


def _alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def rpmvercmp(a: str, b: str) -> int:
    """rpm's comparison of two version (or release) strings (rpmio/rpmvercmp.c): -1, 0 or 1."""
    if a == b:
        return 0
    i = j = 0
    while i < len(a) or j < len(b):
        while i < len(a) and not _alnum(a[i]) and a[i] not in "~^":
            i += 1
        while j < len(b) and not _alnum(b[j]) and b[j] not in "~^":
            j += 1
        ca, cb = a[i] if i < len(a) else "", b[j] if j < len(b) else ""
        if ca == "~" or cb == "~":  # a tilde sorts before anything, even the end
            if ca != "~":
                return 1
            if cb != "~":
                return -1
            i, j = i + 1, j + 1
            continue
        if ca == "^" or cb == "^":  # a caret sorts after the end, before anything else
            if not ca:
                return -1
            if not cb:
                return 1
            if ca != "^":
                return 1
            if cb != "^":
                return -1
            i, j = i + 1, j + 1
            continue
        if not (ca and cb):
            break
        numeric = ca.isdigit()
        kind = str.isdigit if numeric else (lambda c: c.isascii() and c.isalpha())
        si, sj = i, j
        while i < len(a) and kind(a[i]):
            i += 1
        while j < len(b) and kind(b[j]):
            j += 1
        one, two = a[si:i], b[sj:j]
        if not two:  # segments of different kinds: a number is newer than letters
            return 1 if numeric else -1
        if numeric:
            one, two = one.lstrip("0"), two.lstrip("0")
            if len(one) != len(two):
                return 1 if len(one) > len(two) else -1
        if one != two:
            return 1 if one > two else -1
    if i >= len(a) and j >= len(b):
        return 0
    return -1 if i >= len(a) else 1


def _split_rpm(version: str) -> tuple[str | None, str, str | None]:
    """[epoch:]version[-release] as rpm's parseEVR splits it: the epoch is leading digits before a colon."""
    digits = len(version) - len(version.lstrip("0123456789"))
    rest = version[digits:]
    dash = rest.rfind("-")
    release = rest[dash + 1:] if dash >= 0 else None
    evr = version[:digits + dash] if dash >= 0 else version
    if rest.startswith(":"):
        return version[:digits] or "0", evr[digits + 1:], release
    return None, evr, release


def rpm_compare(a: str, b: str) -> int:
    """Compare two rpm [epoch:]version[-release] strings as rpm 4.18's rpm.vercmp does (with equal epoch and
    version, a side without a release sorts first): -1, 0 or 1."""
    ea, va, ra = _split_rpm(a)
    eb, vb, rb = _split_rpm(b)
    result = rpmvercmp(ea or "0", eb or "0") or rpmvercmp(va, vb)
    if result or (ra is None and rb is None):
        return result
    if ra is None or rb is None:
        return -1 if ra is None else 1
    return rpmvercmp(ra, rb)


def _rpm_same(spec: str, version: str) -> bool:
    """An exact rpm spec without a release (`570.86.15`) names every release of that epoch and version."""
    es, vs, rs = _split_rpm(spec)
    if rs is not None:
        return rpm_compare(spec, version) == 0
    ev, vv, _ = _split_rpm(version)
    return rpmvercmp(es or "0", ev or "0") == 0 and rpmvercmp(vs, vv) == 0


def compare(backend: Backend, a: str, b: str) -> int:
    """Compare two versions in the backend's order: -1, 0 or 1."""
    return deb_compare(a, b) if backend == "apt" else rpm_compare(a, b)


def is_glob(spec: str) -> bool:
    """True when a version spec is a glob (`570.86.*`) rather than one exact version."""
    return any(c in GLOB_CHARS for c in spec)


def check_spec(spec: str) -> str:
    """A version or version glob as the desired state may write it; ValueError says what is wrong."""
    if not VERSION_TEXT.match(spec):
        raise ValueError(f"not a package version or version glob: {spec!r} (e.g. 2.10-3, 1:2.3-4, 570.86.*)")
    if not (spec[0].isdigit() or spec[0] in GLOB_CHARS):
        raise ValueError(f"a version starts with a digit: {spec!r}")
    if spec.count("[") != spec.count("]"):
        raise ValueError(f"unbalanced [ ] in the version glob {spec!r}")
    return spec


def matches(backend: Backend, spec: str, version: str) -> bool:
    """True when VERSION is the exact version SPEC (equal in the backend's order) or matches the glob SPEC."""
    if is_glob(spec):
        return fnmatch.fnmatchcase(version, spec)
    return deb_compare(spec, version) == 0 if backend == "apt" else _rpm_same(spec, version)


def highest(backend: Backend, versions: Iterable[str]) -> str | None:
    """The newest of VERSIONS in the backend's order (None when there are none)."""
    ordered = sorted(set(versions), key=cmp_to_key(lambda a, b: compare(backend, str(a), str(b))))
    return ordered[-1] if ordered else None


def resolve(backend: Backend, spec: str, candidates: Iterable[str]) -> str | None:
    """The version SPEC asks for among CANDIDATES: the exact one, or the newest matching a glob (None: none)."""
    return highest(backend, (v for v in candidates if matches(backend, spec, v)))
