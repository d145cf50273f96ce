"""Host key checking against a known_hosts file: refuse unknown or changed keys, or trust new ones on request.

fabric 3.2.3 gives every `Connection` paramiko's AutoAddPolicy and loads no known_hosts at all, so
this module does the checking itself: before a connection opens, its client gets the known keys of
the host (under the name paramiko will look up) and a policy that refuses any host it does not know.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko


class HostKeyRefused(Exception):
    """A host key that is unknown (under the reject policy) or that changed: the connection is refused."""


def fingerprint(key: paramiko.PKey) -> str:
    """The OpenSSH-style SHA256 fingerprint of a public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def known_hosts_name(host: str, port: int, alias: str | None = None) -> str:
    """The name a host's key is filed under in known_hosts: alias or host, `[host]:port` off port 22."""
    if alias:
        return alias
    return host if port == 22 else f"[{host}]:{port}"


class KnownHosts:
    """One known_hosts file, read once; thread-safe lookups and trust-on-first-use appends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._keys = _KeyIndex()
        self._lock = threading.Lock()
        self.revoked: set[str] = set()  # base64 blobs of the `@revoked` lines
        if path.is_file():
            self._load(path.read_text(encoding="utf-8", errors="replace"))

    def _load(self, text: str) -> None:
        """Read the entries; skip bad lines and `@cert-authority` (paramiko's own loader dies on markers)."""
        for lineno, line in enumerate(text.splitlines(), start=1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if parts[0].startswith("@"):
                if parts[0] == "@revoked" and len(parts) >= 4:
                    self.revoked.add(parts[3])
                continue
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
            except (paramiko.hostkeys.InvalidHostKey, paramiko.SSHException, ValueError):
                continue  # a bad line is skipped, as OpenSSH does
            if entry is not None and entry.key is not None:
                for name in entry.hostnames:
                    self._keys.add(name, entry.key.get_name(), entry.key)

    def is_revoked(self, key: paramiko.PKey) -> bool:
        """Whether a `@revoked` line names this key (whatever host pattern it has)."""
        return key.get_base64() in self.revoked

    def lookup(self, name: str) -> dict[str, paramiko.PKey]:
        """The known keys of a host name, by key type (empty when the host is unknown)."""
        with self._lock:
            return self._keys.lookup(name)

    def record(self, name: str, key: paramiko.PKey) -> None:
        """Append a new host's key to the file; refuse if another key of that type was recorded meanwhile."""
        with self._lock:
            known = self._keys.lookup(name).get(key.get_name())
            if known is not None:
                if known != key:
                    raise HostKeyRefused(f"HOST KEY CHANGED for {name} while connecting: refusing")
                return
            self._append(f"{name} {key.get_name()} {key.get_base64()}\n")
            self._keys.add(name, key.get_name(), key)

    def _append(self, line: str) -> None:
        """Append one line, creating the file (mode 0600) and its directory when missing."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="ascii") as handle:
            if handle.tell() > 0 and not self.path.read_bytes().endswith(b"\n"):
                handle.write("\n")
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


class _KeyIndex:
    """paramiko.HostKeys' answers (`add`, then `lookup` as a dict by key type), found by name instead of by scanning.

    paramiko compares a name with every entry on each lookup and add: with one line per node, a connection to
    each of N nodes cost O(N) (two lookups each) and reading the file O(N^2). Hashed names (`|1|salt|hash`) can
    only be found by hashing the name with each entry's salt, as paramiko and OpenSSH do; answers are remembered
    per name until the next `add`.
    """

    def __init__(self) -> None:
        self._entries: list[tuple[str, str, paramiko.PKey]] = []  # (name, key type, key), first added first
        self._where: dict[tuple[str, str], int] = {}  # (name, key type) -> its entry
        self._by_name: dict[str, list[int]] = {}
        self._hashed: list[int] = []  # entries whose name is hashed
        self._answers: dict[str, dict[str, paramiko.PKey]] = {}

    def add(self, name: str, keytype: str, key: paramiko.PKey) -> None:
        """Add a key; one already there for the same name and key type is replaced (as paramiko does)."""
        self._answers.clear()
        at = self._where.get((name, keytype))
        if at is not None:
            self._entries[at] = (name, keytype, key)
            return
        at = self._where[(name, keytype)] = len(self._entries)
        self._entries.append((name, keytype, key))
        self._by_name.setdefault(name, []).append(at)
        if name.startswith("|1|"):
            self._hashed.append(at)

    def lookup(self, name: str) -> dict[str, paramiko.PKey]:
        """The keys filed under NAME, by key type; for a type found twice, the first entry's (as paramiko)."""
        answer = self._answers.get(name)
        if answer is None:
            found = set(self._by_name.get(name, ()))
            if not name.startswith("|1|"):
                found.update(at for at in self._hashed if _hash_matches(name, self._entries[at][0]))
            answer = {}
            for at in sorted(found):
                _, keytype, key = self._entries[at]
                answer.setdefault(keytype, key)
            self._answers[name] = answer
        return dict(answer)


def _hash_matches(name: str, hashed: str) -> bool:
    """Whether NAME hashes to a known_hosts `|1|salt|hash` name (paramiko's HostKeys.hash_host, compared alike)."""
    parts = hashed.split("|")
    try:
        salt = base64.b64decode(parts[2]) if len(parts) == 4 else b""
    except binascii.Error:
        return False
    if len(salt) != hashlib.sha1().digest_size:  # malformed: matches nothing (paramiko stopped on an assert)
        return False
    digest = hmac.new(salt, name.encode("utf-8"), hashlib.sha1).digest()
    ours = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    return hmac.compare_digest(ours.encode(), hashed.encode("utf-8"))


@dataclass(frozen=True)
class HostKeyCheck:
    """How one connection's host key is checked: under which name, in which file, with which policy."""

    label: str  # for messages, e.g. "gpu01 (10.250.0.11)" or "bastion ops@10.0.0.1:22"
    name: str  # the known_hosts lookup name
    known: KnownHosts
    accept_new: bool

    def unknown_message(self) -> str:
        """The refusal message for a host that is not in known_hosts."""
        return (f"host key for {self.label} not in {self.known.path} (as {self.name}): refusing "
                "(set ssh.host_key_policy: accept-new to trust on first use)")

    def revoked_message(self, key: paramiko.PKey) -> str:
        """The refusal message for a host presenting a key marked `@revoked`."""
        return (f"host key for {self.label} ({key.get_name()} {fingerprint(key)}) is marked @revoked in "
                f"{self.known.path}: refusing")

    def verify(self, key: paramiko.PKey) -> None:
        """Refuse a revoked key (paramiko checked everything else during the handshake)."""
        if self.known.is_revoked(key):
            raise HostKeyRefused(self.revoked_message(key))

    def changed_message(self, offered: paramiko.PKey, expected: paramiko.PKey) -> str:
        """The refusal message for a host whose key differs from the recorded one."""
        return (f"HOST KEY CHANGED for {self.label}: {self.known.path} has {expected.get_name()} "
                f"{fingerprint(expected)} for {self.name}, the server offered {offered.get_name()} "
                f"{fingerprint(offered)}: refusing (possible man-in-the-middle; if the node was reinstalled, "
                f"remove the old key: ssh-keygen -R '{self.name}' -f {self.known.path})")

    def no_common_type_message(self) -> str:
        """The refusal message for a host that offers none of the key types recorded for it."""
        known = self.known.lookup(self.name)
        recorded = ", ".join(f"{kind} {fingerprint(key)}" for kind, key in known.items())
        return (f"HOST KEY CHANGED for {self.label}: {self.known.path} has {recorded} for {self.name}, the server "
                f"offers no key of those types: refusing (possible man-in-the-middle; if the node was reinstalled, "
                f"remove the old key: ssh-keygen -R '{self.name}' -f {self.known.path})")


class _Policy(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only for a host with no known key: record it (accept-new) or refuse."""

    def __init__(self, check: HostKeyCheck) -> None:
        self.check = check

    def missing_host_key(self, client: Any, hostname: str, key: paramiko.PKey) -> None:
        """Refuse the unknown key, or record it when the policy is accept-new."""
        self.check.verify(key)
        if not self.check.accept_new:
            raise HostKeyRefused(self.check.unknown_message())
        self.check.known.record(self.check.name, key)


# The host key algorithms that sign with a key of each known_hosts type.
_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}


def unverifiable_algorithms(known_types: set[str]) -> list[str]:
    """Host key algorithms to leave out of the negotiation: those no known key of this host can verify.

    A server with RSA and ed25519 keys, known by its RSA key only, must be asked for an RSA signature
    (paramiko alone puts the known type, `ssh-rsa` (SHA-1), first, which OpenSSH 8.8+ no longer offers, and
    would then settle on ed25519 and refuse the host). Nothing is left out for an unknown host.
    """
    if not known_types:
        return []
    allowed = {algo for kind in known_types for algo in _ALGORITHMS.get(kind, (kind,))}
    allowed |= {f"{a}-cert-v01@openssh.com" for a in allowed}
    return [algo for algo in paramiko.Transport._preferred_keys if algo not in allowed]


def enforce(client: paramiko.SSHClient, check: HostKeyCheck, host: str, port: int) -> None:
    """Arm a paramiko client: the host's known keys under paramiko's lookup name, and no AutoAdd."""
    paramiko_name = known_hosts_name(host, port)
    keys = client.get_host_keys()
    keys.clear()
    for keytype, key in check.known.lookup(check.name).items():
        keys.add(paramiko_name, keytype, key)
    client.set_missing_host_key_policy(_Policy(check))


def refusal(exc: paramiko.BadHostKeyException, check: HostKeyCheck) -> HostKeyRefused:
    """Turn paramiko's mismatch exception into a refusal with the clear message."""
    return HostKeyRefused(check.changed_message(exc.key, exc.expected_key))
