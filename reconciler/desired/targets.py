"""Dangerous targets (issue 22): what can only brick a node is refused; what is legal but rarely meant is warned.

Refused (errors at file:line): a mount over a system directory (`/`, `/etc`, `/usr`, `/var`, `/boot`, `/proc`,
`/sys`, `/dev`, `/run`, the binary and library directories, `/root`), an NFS export of one (the same list), of a
directory under a kernel file system or of one that decides who can log in (`/etc/pam.d`, `/root/.ssh`, ...),
and a managed file or image under the kernel's virtual file systems (`/proc`, `/sys`, `/dev`), where a
temp-file-and-rename write has no meaning.
Warned (risk warnings, in `validate`, plans and PR comments): a mount over a directory that holds a file the
desired state manages (the file would be written onto the mounted file system, or hidden by it), an export of a
directory under `/etc`, `/boot` or `/root` (the node's configuration and secrets, to every client) or of one
that holds managed files, `no_root_squash` to a host wildcard (`*.example.com`; wide networks and `*`:
reconciler/desired/risks.py), setuid or setgid modes, world-writable managed files, and files that can lock the
reconciler or every user out (sshd, PAM, sudoers, passwd/shadow/group).
"""

from __future__ import annotations

from collections.abc import Iterator

from reconciler.model import DesiredState
from reconciler.model.state import section_paths

SYSTEM_DIRS = frozenset({"/", "/etc", "/usr", "/var", "/boot", "/proc", "/sys", "/dev", "/run", "/bin", "/sbin",
                         "/lib", "/lib32", "/lib64", "/libx32", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/local",
                         "/var/lib", "/root", "/etc/ssh", "/etc/munge", "/etc/pam.d"})
VIRTUAL_FS = ("/proc", "/sys", "/dev")
LOCKOUT_FILES = ("/etc/ssh/sshd_config", "/etc/sudoers", "/etc/passwd", "/etc/shadow", "/etc/group",
                 "/etc/gshadow", "/etc/nsswitch.conf", "/etc/hosts.allow", "/etc/hosts.deny")
LOCKOUT_DIRS = ("/etc/pam.d", "/etc/ssh/sshd_config.d", "/etc/sudoers.d", "/root/.ssh")
PRIVATE_DIRS = ("/etc", "/boot", "/root")  # an export below one is legal, but hands the node's config to clients

Problem = tuple[tuple[str | int, ...], str]


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _virtual(path: str) -> str | None:
    return next((fs for fs in VIRTUAL_FS if _under(path, fs)), None)


def _managed_paths(state: DesiredState) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every file the desired state writes on nodes, with its key path."""
    conf = state.cluster.config_dir
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        yield ("cluster", "config_dir"), f"{conf}/{name}"
    for index, item in enumerate(state.files):
        yield ("files", index, "path"), item.path
    for index, patch in enumerate(state.patches):
        yield ("patches", index, "path"), patch.path
    for index, image in enumerate(state.images):
        yield ("images", index, "path"), image.path
    yield from section_paths(state)


def refusals(state: DesiredState) -> Iterator[Problem]:
    """Targets that can only break a node: errors."""
    for index, mount in enumerate(state.storage.mounts):
        if mount.mountpoint in SYSTEM_DIRS:
            yield ("storage", "mounts", index, "mountpoint"), (
                f"a mount over {mount.mountpoint} hides a system directory the node needs to run (refused)")
    for path, target in _managed_paths(state):
        if path[0] != "cluster" and (fs := _virtual(target)):
            yield path, f"{target} is under {fs}, a kernel file system: not a file to manage (refused)"
    for index, export in enumerate(state.storage.exports):
        where, name = ("storage", "exports", index, "path"), export.path
        if name in SYSTEM_DIRS:
            yield where, (f"an export of {name} hands a system directory of {export.server} to every NFS client "
                          "(refused)")
        elif fs := _virtual(name):
            yield where, f"{name} is under {fs}, a kernel file system: not a directory to export (refused)"
        elif lock := next((d for d in LOCKOUT_DIRS if _under(name, d)), None):
            yield where, (f"an export of {name} hands {lock}, which decides who can log in to {export.server}, to "
                          "NFS clients (refused)")


def _mode_bits(mode: str | None) -> int:
    return int(mode, 8) if mode else 0


def risks(state: DesiredState) -> Iterator[Problem]:
    """Targets that are legal but rarely meant: warnings."""
    managed = list(_managed_paths(state))
    for index, mount in enumerate(state.storage.mounts):
        inside = [target for key, target in managed  # images belong on shared storage: not a surprise there
                  if key[0] != "images" and _under(target, mount.mountpoint) and target != mount.mountpoint]
        if inside and mount.mountpoint not in SYSTEM_DIRS:
            yield ("storage", "mounts", index, "mountpoint"), (
                f"a mount over {mount.mountpoint} holds managed file(s) {', '.join(sorted(set(inside))[:3])}: they "
                "are written onto the mounted file system (shared by every node that mounts it), or hidden by it")
    modes: list[tuple[tuple[str | int, ...], str, str | None]] = [
        (("files", i, "mode"), f.path, f.mode) for i, f in enumerate(state.files)]
    modes += [(("patches", i, "mode"), p.path, p.mode) for i, p in enumerate(state.patches) if p.mode]
    yield from _export_risks(state, managed)
    for path, target, mode in modes:
        bits = _mode_bits(mode)
        if bits & 0o6000:
            kind = "setuid and setgid" if bits & 0o6000 == 0o6000 else ("setuid" if bits & 0o4000 else "setgid")
            yield path, f"{target} is {kind} (mode {mode}): it runs with its owner's rights for every user"
        if path[0] == "files" and bits & 0o002:
            yield path, f"{target} is world-writable (mode {mode})"
    for key, target in managed:
        if target in LOCKOUT_FILES or any(_under(target, d) for d in LOCKOUT_DIRS):
            yield key, (f"{target} decides who can log in or become root: a mistake here can lock out every user "
                         "and the reconciler itself (test it on one node first: rollout canary)")


def wildcard_host(client: str) -> bool:
    """True for an exports(5) host pattern with a wildcard (`*.example.com`, `gpu?`); not `*` alone, a network
    or a netgroup (reconciler/model/values.py's is_wide_client judges those)."""
    return not client.startswith("@") and "/" not in client and any(c in client for c in "*?") \
        and client.strip("*?.") != ""


def _export_risks(state: DesiredState, managed: list[tuple[tuple[str | int, ...], str]]) -> Iterator[Problem]:
    """Exports that are legal but rarely meant: the node's configuration, managed files, root to a wildcard."""
    for index, export in enumerate(state.storage.exports):
        where, name = ("storage", "exports", index, "path"), export.path
        private = next((d for d in PRIVATE_DIRS if _under(name, d)), None)
        if private and name not in SYSTEM_DIRS:
            yield where, (f"an export of {name} hands part of {private} on {export.server} (its configuration "
                          "and secrets) to NFS clients")
        inside = sorted({t for key, t in managed if key[0] != "images" and _under(t, name) and t != name})
        if inside:
            yield where, (f"an export of {name} holds managed file(s) {', '.join(inside[:3])}: NFS clients read "
                          + ("and can change them" if "rw" in export.options else "them"))
        if "no_root_squash" in export.options:
            for j, client in enumerate(export.clients):
                if wildcard_host(client):
                    yield ("storage", "exports", index, "clients", j), (
                        f"{name} is exported with no_root_squash to a host wildcard ({client}): root on any host "
                        "whose name matches is root on the export")
