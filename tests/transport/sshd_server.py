"""Real OpenSSH servers for the transport tests: `/usr/sbin/sshd -D -e` on 127.0.0.1, a random port each."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def keygen(path: Path, kind: str = "ed25519") -> str:
    """Make an unencrypted key pair at `path`; return the public key as `type base64`."""
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (right now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Sshd:
    """One running sshd: where it listens, its host public key, its log."""

    workdir: Path
    port: int
    host_key: str  # "ssh-ed25519 AAAA..."
    keys_dir: Path | None = None  # world-readable: sshd reads authorized_keys as the (non-root) user
    process: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.workdir / "sshd.log"

    @property
    def known_hosts_line(self) -> str:
        """The known_hosts line for this server, filed as OpenSSH would (`[127.0.0.1]:port`)."""
        return f"[127.0.0.1]:{self.port} {self.host_key}\n"

    def stop(self) -> None:
        """Terminate the server and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        if self.keys_dir is not None:
            shutil.rmtree(self.keys_dir, ignore_errors=True)


def start_sshd(workdir: Path, authorized_key: str, extra: str = "") -> Sshd:
    """Start sshd in `workdir` with its own host key, accepting `authorized_key` for root and any user."""
    workdir.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
    host_key = keygen(workdir / "host_key")
    keys_dir = Path(tempfile.mkdtemp(prefix="reconciler-sshd-keys-"))
    keys_dir.chmod(0o755)
    (keys_dir / "authorized_keys").write_text(authorized_key + "\n")
    (keys_dir / "authorized_keys").chmod(0o644)
    port = free_port()
    config = workdir / "sshd_config"
    config.write_text(f"""\
{extra}
Port {port}
ListenAddress 127.0.0.1
HostKey {workdir}/host_key
PidFile {workdir}/sshd.pid
AuthorizedKeysFile {keys_dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
LogLevel VERBOSE
""")
    server = Sshd(workdir, port, host_key, keys_dir)
    with server.log.open("wb") as log:
        server.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    _wait_for_banner(server)
    return server


def _wait_for_banner(server: Sshd, seconds: float = 10.0) -> None:
    """Wait until the server answers with an SSH banner."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            raise RuntimeError(f"sshd exited: {server.log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd on port {server.port} did not answer: {server.log.read_text()}")
