"""One package transaction on one node, as shell: every version change in one apt-get or dnf invocation, the holds
of the named packages lifted before it and put back after it; holds of packages `packages:` does not name are
never touched (and never overridden: no --allow-change-held-packages)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from reconciler.common.versions import Backend, is_glob

LOCK_WAIT = 300  # seconds a command waits for a dpkg/rpm lock another process holds, then fails
APT_GET = ("DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout={wait} "
           "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold --no-install-recommends")
DNF = "timeout {wait} dnf -y -q"


@dataclass(frozen=True)
class Move:
    """One named package in a node's transaction: its version before and after (None: not installed), whether it
    is held before and after, and whether its version changes (False: only its hold does). PENDING: `after` is
    the spec (present, an exact version or a glob) the package manager resolves after a metadata refresh."""

    name: str
    before: str | None
    after: str | None
    held: bool
    hold: bool
    changes_version: bool = True
    pending: bool = False

    def reversed(self) -> Move:
        """The move that puts the package back as it was."""
        return Move(self.name, self.after, self.before, self.hold and self.after is not None, self.held,
                    self.changes_version)

    def argument(self, backend: Backend) -> str:
        """The package manager's argument that installs it (`name=V` for apt, `name-V` for dnf; a pending one's
        spec: its name alone for present, the glob as apt and dnf match versions)."""
        if self.pending and self.after == "present":
            return self.name
        return f"{self.name}={self.after}" if backend == "apt" else f"{self.name}-{self.after}"

    @property
    def text(self) -> str:
        """What the move does, for a plan summary."""
        if not self.changes_version:
            return f"{'hold' if self.hold else 'unhold'} {self.name}"
        if self.after is None:
            return f"remove {self.name} {self.before}"
        if self.pending:
            offer = ("the newest version offered" if self.after == "present" else
                     self.after + (", the newest match offered" if is_glob(self.after) else ""))
            text = (f"install {self.name} ({offer} after the refresh)" if self.before is None else
                    f"{self.name} {self.before} → {offer} (after the refresh)")
        else:
            text = f"install {self.name} {self.after}" if self.before is None else \
                f"{self.name} {self.before} → {self.after}"
        if self.hold != self.held:
            text += " and hold" if self.hold else " and unhold"
        return text


def hold_command(backend: Backend, names: Iterable[str], hold: bool) -> str:
    """Shell: hold or unhold NAMES (apt-mark / dnf versionlock)."""
    q = " ".join(shlex.quote(n) for n in names)
    if backend == "apt":
        return f"apt-mark {'hold' if hold else 'unhold'} {q} >/dev/null"
    return f"{DNF.format(wait=LOCK_WAIT)} versionlock {'add' if hold else 'delete'} {q} >/dev/null"


def _package_manager(backend: Backend, moves: list[Move], downgrade: bool) -> str:
    """Shell: the one package-manager transaction of MOVES (apt: one apt-get; dnf: one `dnf install`, then one
    `dnf remove` when packages go; Debian's dnf 4 has no safe single command for both)."""
    installs = [m for m in moves if m.after is not None]
    removals = [m for m in moves if m.after is None]
    if backend == "apt":
        opts = (" --allow-downgrades" if downgrade else "") + ("" if removals else " --no-remove")
        args = [shlex.quote(m.argument("apt")) for m in installs] + [shlex.quote(f"{m.name}-") for m in removals]
        return f"{APT_GET.format(wait=LOCK_WAIT)}{opts} install {' '.join(args)}"
    base = DNF.format(wait=LOCK_WAIT)
    parts = []
    if installs:
        parts.append(f"{base} install " + " ".join(shlex.quote(m.argument("dnf")) for m in installs))
    if removals:  # --noautoremove: what the removed packages pulled in stays, as with apt-get remove
        parts.append(f"{base} remove --noautoremove " + " ".join(shlex.quote(m.name) for m in removals))
    return " && ".join(parts)


def transaction(backend: Backend, moves: list[Move], downgrade: bool) -> str:
    """Shell: lift the holds of the named packages whose version changes, run the one transaction, then hold
    what should be held; when the package manager fails, the lifted holds are put back and the command fails."""
    versioned = [m for m in moves if m.changes_version]
    lifted = [m.name for m in versioned if m.held]
    hold_after = [m.name for m in moves if m.hold and m.after is not None and (m.changes_version or not m.held)]
    unhold_after = [m.name for m in moves if not m.changes_version and m.held and not m.hold]
    parts = []
    if versioned:
        main = _package_manager(backend, versioned, downgrade)
        if lifted:
            parts.append(hold_command(backend, lifted, False))
            main = (f"{{ {main}; rc=$?; if [ $rc -ne 0 ]; then {hold_command(backend, lifted, True)}; fi; "
                    f"[ $rc -eq 0 ]; }}")
        parts.append(main)
    if hold_after:
        parts.append(hold_command(backend, hold_after, True))
    if unhold_after:
        parts.append(hold_command(backend, unhold_after, False))
    return " && ".join(parts)


def is_version(backend: Backend, name: str, version: str | None) -> str:
    """Shell: exits 0 when NAME is installed at VERSION (None: not installed)."""
    q = shlex.quote(name)
    if backend == "apt":
        # db:Status-Status, not Status-Abbrev: a held package is `hi`, not `ii`
        query = f"dpkg-query -W -f='${{db:Status-Status}} ${{Version}}' {q} 2>/dev/null"
        if version is None:
            return f"! {query} | grep -q '^installed '"
        return f"{query} | grep -qxF {shlex.quote('installed ' + version)}"
    if version is None:
        return f"! rpm -q {q} >/dev/null 2>&1"
    query = f"rpm -q --qf '%{{EPOCH}}:%{{VERSION}}-%{{RELEASE}}\\n' {q} 2>/dev/null"
    evr = version if ":" in version else f"(none):{version}"
    return f"{query} | grep -qxF {shlex.quote(evr)}"


def at_versions(backend: Backend, moves: list[Move]) -> str:
    """Shell: exits 0 when every versioned move's package is at its `before` version (the transaction did not
    land: nothing to restore)."""
    return " && ".join(is_version(backend, m.name, m.before) for m in moves if m.changes_version) or "true"
