"""Where an import reads an existing cluster's files from: a local directory, or a node over SSH."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

from reconciler.desired.inventory import NodeSpec
from reconciler.facts.gather import GATHER_COMMAND, FactRequest
from reconciler.facts.parsers import parse_slurm_version
from reconciler.model import ServiceManager, SSHDefaults, netnames
from reconciler.transport.base import CommandResult
from reconciler.transport.ssh import SSHTransport

MAX_FILE = 5 << 20
FORKS = 32  # nodes read at once in the adoption round trip
_MARK = "===reconciler-import==="


@dataclass
class SshTarget:
    """`ssh://[user@]host[:port]`."""

    user: str | None
    host: str
    port: int | None


def parse_ssh_url(url: str) -> SshTarget | None:
    """The parts of an ssh:// URL, or None when SOURCE is not one."""
    if not url.startswith("ssh://"):
        return None
    parsed = urlparse(url)
    if not parsed.hostname:
        raise ValueError(f"{url}: no host")
    try:  # the parts reach paramiko and any ProxyCommand of ssh_config: a hostname, user name and port only
        netnames.host(parsed.hostname)
        if parsed.username is not None:
            netnames.user(parsed.username)
        port = parsed.port
    except ValueError as exc:
        raise ValueError(f"{url}: {exc}") from None
    return SshTarget(parsed.username, parsed.hostname, port)


class LocalFiles:
    """Files of a local directory laid out like the node's config dir (plus optional `exports` and `fstab`)."""

    def __init__(self, root: Path, config_dir: str) -> None:
        self.root, self.config_dir = root, config_dir
        self.node_name = "nfs01"
        self.slurm_version: str | None = None

    def main(self, name: str) -> str:
        """Where reading starts for a file of the config dir (here: the file in the directory)."""
        return str(self.root / name)

    def read(self, path: str) -> str | None:
        """The text of a file of the directory; a node path elsewhere is looked up relative to the config dir."""
        local = Path(path)
        if not local.is_relative_to(self.root):
            rel = posixpath.relpath(path, self.config_dir)
            local = self.root / (posixpath.basename(path) if rel.startswith("..") else rel)
        if not local.is_file():
            return None
        if local.stat().st_size > MAX_FILE:
            raise ValueError(f"{local}: larger than {MAX_FILE} bytes")
        return local.read_text(encoding="utf-8", errors="replace")

    def storage(self) -> tuple[str | None, str | None]:
        """The exports and fstab texts, when the directory has them."""
        return self.read(self.main("exports")), self.read(self.main("fstab"))


class RemoteFiles:
    """Files read from one node over the reconciler's SSH transport (host keys checked as everywhere)."""

    def __init__(self, target: SshTarget, config_dir: str, ssh: SSHDefaults, base_dir: Path) -> None:
        self.config_dir = config_dir
        self.node_name = re.sub(r"[^A-Za-z0-9_.-]", "-", target.host.split(".")[0])
        self.spec = NodeSpec(name=target.host, host=target.host, port=target.port or ssh.port,
                             user=target.user or ssh.user, identity_file=ssh.identity_file,
                             proxy_jump=ssh.proxy_jump, roles=frozenset(), service_manager=ServiceManager(),
                             drain=None)
        self.transport = SSHTransport(ssh, base_dir, forks=FORKS)
        self.files: dict[str, str] = {}
        self.asked: set[str] = set()
        self.slurm_version: str | None = None
        self.hostname: str | None = None
        self._fetch([posixpath.join(config_dir, n) for n in ("slurm.conf", "gres.conf", "cgroup.conf")]
                    + ["/etc/exports", "/etc/fstab"], with_facts=True)

    def _fetch(self, paths: list[str], with_facts: bool = False) -> None:
        """One round trip: every file (size-limited), the Slurm version and the host name."""
        parts = [f"for f in {' '.join(shlex.quote(p) for p in paths)}; do "
                 f"if [ -f \"$f\" ] && [ $(stat -c %s \"$f\") -le {MAX_FILE} ]; then "
                 f"echo '{_MARK} file' \"$f\"; cat \"$f\"; echo; fi; done"]
        if with_facts:
            parts.append(f"echo '{_MARK} version'; slurmctld -V 2>/dev/null || slurmd -V 2>/dev/null || sinfo -V "
                         f"2>/dev/null; echo '{_MARK} hostname'; hostname -s")
        result = self.transport.run(self.spec, "; ".join(parts))
        if not result.ok:
            raise ConnectionError(f"cannot read the cluster's files: {result.describe()}")
        self.asked.update(paths)  # a path asked for and not sent back does not exist there: never asked again
        current: str | None = None
        body: list[str] = []
        for line in result.stdout.splitlines() + [f"{_MARK} end"]:
            if line.startswith(_MARK):
                if current is not None:
                    self._store(current, "\n".join(body))
                current, body = line[len(_MARK) + 1:], []
            else:
                body.append(line)

    def _store(self, header: str, text: str) -> None:
        kind, _, path = header.partition(" ")
        if kind == "file":
            # `cat; echo` ends every file with a newline more: what is left lacks one only if the file did
            self.files[path] = text if not text or text.endswith("\n") else text + "\n"
        elif kind == "version":
            self.slurm_version = parse_slurm_version(text)
        elif kind == "hostname" and text.strip():
            self.hostname = text.strip()
            self.node_name = self.hostname

    def main(self, name: str) -> str:
        """Where reading starts for a file of the config dir."""
        return posixpath.join(self.config_dir, name)

    def read(self, path: str) -> str | None:
        """The text of a node path (fetched in a further round trip when an Include names a new file)."""
        if path not in self.asked:
            self._fetch([path])
        return self.files.get(path)

    def storage(self) -> tuple[str | None, str | None]:
        """The node's /etc/exports and /etc/fstab texts."""
        return self.files.get("/etc/exports"), self.files.get("/etc/fstab")

    def close(self) -> None:
        """Close the SSH connection."""
        self.transport.close()

    def read_nodes(self, names: list[str], req: FactRequest,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, dict | str]:
        """One round trip to every node (in parallel): the fact script's JSON answer to REQ, or why a node
        could not be read. Nodes are reached by their Slurm name with the import's SSH settings; the node
        imported from is reached as its URL said."""
        done, lock = [0], threading.Lock()
        specs = [replace(self.spec, name=name) if name == self.hostname else replace(self.spec, name=name, host=name)
                 for name in names]
        encoded = req.encode()

        def one(spec: NodeSpec) -> CommandResult:
            result = self.transport.run(spec, GATHER_COMMAND, stdin=encoded)
            with lock:
                done[0] += 1
                if progress is not None:
                    progress(done[0], len(specs))
            return result

        answers: dict[str, dict | str] = {}
        for name, result in self.transport.map_nodes(specs, one).items():
            if not result.ok:
                answers[name] = result.describe()
                continue
            try:
                raw = json.loads(result.stdout)
            except ValueError as exc:
                answers[name] = f"unreadable answer: {exc}"
                continue
            answers[name] = raw if "files" in raw else f"fact script failed: {raw.get('error')}"
        return answers
