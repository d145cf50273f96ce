"""Building SSH connections from the settings: user, port and key, ssh_config, bastions, strict host keys."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fabric
import paramiko
from fabric.connection import derive_shorthand

from reconciler.desired.inventory import NodeSpec
from reconciler.model import SSHDefaults
from reconciler.transport.hostkeys import (
    HostKeyCheck,
    KnownHosts,
    enforce,
    known_hosts_name,
    unverifiable_algorithms,
)
from reconciler.transport.sshconfig import CachedSSHConfig
from reconciler.transport.sshconnection import GcmFirstTransport, NodeConnection


class ConnectionFactory:
    """Builds (unopened) connections to nodes and keeps what they share: ssh_config, known_hosts, keys, bastions."""

    def __init__(self, ssh: SSHDefaults, base_dir: Path, lock: threading.RLock) -> None:
        self.ssh = ssh
        self.base_dir = Path(base_dir)
        self._lock = lock  # the transport's: its bookkeeping of connections and these bastions goes together
        self._ssh_config = self._load_ssh_config()
        self._gateways: dict[tuple[str, str | None], NodeConnection] = {}
        self._known: dict[Path, KnownHosts] = {}
        self._known_stamp: dict[Path, tuple[float, int] | None] = {}
        self._keys: dict[Path, tuple[tuple[float, int] | None, paramiko.PKey]] = {}

    def take_gateways(self, which: Callable[[NodeConnection], bool] | None = None) -> list[NodeConnection]:
        """Forget the bastion connections WHICH selects (all, without WHICH); the caller closes them."""
        with self._lock:
            keys = [key for key, gw in self._gateways.items() if which is None or which(gw)]
            return [self._gateways.pop(key) for key in keys]

    def build(self, node: NodeSpec) -> NodeConnection:
        """A Connection for a node: its user/port/key, ssh_config settings, bastion and host key check."""
        looked_up = self._ssh_config.lookup(node.host)
        cxn = NodeConnection(
            node.host,
            user=self._pick(node.user, "user", looked_up),
            port=int(self._pick(node.port, "port", looked_up)),
            config=self._fabric_config(),
            gateway=self._gateway(node) if node.proxy_jump else None,
            connect_timeout=self.ssh.connect_timeout,
            connect_kwargs=self._connect_kwargs(node.identity_file, looked_up),
        )
        self._arm_chain(cxn, f"{node.name} ({cxn.host}{'' if cxn.port == 22 else f':{cxn.port}'})")
        return cxn

    def _pick(self, value: Any, field: str, looked_up: paramiko.SSHConfigDict) -> Any:
        """Inventory value when set for the node or in `ssh:`; else ssh_config's; else the default."""
        explicit = value != getattr(self.ssh, field) or field in self.ssh.model_fields_set
        return value if explicit or field not in looked_up else looked_up[field]

    def _gateway(self, node: NodeSpec) -> NodeConnection:
        """The shared connection to a node's bastion (`[user@]host[:port]`), built once."""
        assert node.proxy_jump is not None
        key = (node.proxy_jump, node.identity_file)
        with self._lock:
            gateway = self._gateways.get(key)
            if gateway is None:
                gateway = self._gateways[key] = self._build_gateway(node.proxy_jump, node.identity_file)
            return gateway

    def _build_gateway(self, jump: str, identity_file: str | None) -> NodeConnection:
        """A connection to a bastion; its own user/port come from the jump string, ssh_config, or `ssh:`."""
        parts = derive_shorthand(jump)
        looked_up = self._ssh_config.lookup(parts["host"])
        gateway = NodeConnection(
            parts["host"],
            shared=True,
            user=parts["user"] or looked_up.get("user", self.ssh.user),
            port=int(parts["port"] or looked_up.get("port", 22)),
            config=self._fabric_config(),
            connect_timeout=self.ssh.connect_timeout,
            connect_kwargs=self._connect_kwargs(identity_file, looked_up),
        )
        self._arm_chain(gateway, f"bastion {jump}")
        return gateway

    def _arm_chain(self, cxn: fabric.Connection, label: str) -> None:
        """Give the connection, and every bastion hop before it, strict host key checking."""
        hop: Any = cxn
        while isinstance(hop, fabric.Connection):
            if hop is cxn or getattr(hop, "host_key_check", None) is None:
                check = self._host_key_check(hop, label)
                object.__setattr__(hop, "host_key_check", check)  # hops fabric built are plain Connections
                enforce(hop.client, check, hop.host, int(hop.port))
                disabled = unverifiable_algorithms(set(check.known.lookup(check.name)))
                if disabled:
                    hop.connect_kwargs["disabled_algorithms"] = {"keys": disabled}
            hop = hop.gateway
            label = f"bastion {getattr(hop, 'host', '')}:{getattr(hop, 'port', '')}"

    def _host_key_check(self, cxn: fabric.Connection, label: str) -> HostKeyCheck:
        """Where and under which name this connection's host key must be found."""
        name = known_hosts_name(cxn.host, int(cxn.port), cxn.ssh_config.get("hostkeyalias"))
        path = self._known_hosts_path(cxn.ssh_config)
        stamp = _stamp(path)
        with self._lock:
            known = self._known.get(path)
            if known is None or self._known_stamp.get(path) != stamp:  # edited since: a reconnect reads it again
                known = self._known[path] = KnownHosts(path)
                self._known_stamp[path] = stamp
        return HostKeyCheck(label, name, known, self.ssh.host_key_policy == "accept-new")

    def _known_hosts_path(self, looked_up: paramiko.SSHConfigDict) -> Path:
        """`ssh.known_hosts`, else ssh_config's (first) UserKnownHostsFile, else ~/.ssh/known_hosts."""
        if self.ssh.known_hosts:
            return self._resolve(self.ssh.known_hosts)
        configured = looked_up.get("userknownhostsfile")
        if configured:
            return self._resolve(configured.split()[0].replace("%d", str(Path.home())))
        return Path.home() / ".ssh" / "known_hosts"

    # ------------------------------------------------------------ configuration

    def _resolve(self, path: str) -> Path:
        """A path from the desired state: `~` expanded, relative to the desired-state directory."""
        expanded = Path(path).expanduser()
        return expanded if expanded.is_absolute() else (self.base_dir / expanded).resolve()

    def _load_ssh_config(self) -> paramiko.SSHConfig:
        """The ssh_config file named by `ssh.config`, parsed once; none at all when unset."""
        if not self.ssh.config:
            return CachedSSHConfig()
        path = self._resolve(self.ssh.config)
        if not path.is_file():
            raise FileNotFoundError(f"ssh.config: {path} does not exist")
        return CachedSSHConfig.from_path(str(path))

    def _fabric_config(self) -> fabric.Config:
        """A fabric Config with our parsed ssh_config and no fabric/invoke config files read, one per connection:
        invoke's Config merges lazily on access, and one shared by connections opened in parallel was seen
        half-merged (`No attribute or config key found for 'forward_agent'` on 1 node of 256)."""
        return fabric.Config(ssh_config=self._ssh_config, lazy=True)

    def _connect_kwargs(self, identity_file: str | None, looked_up: paramiko.SSHConfigDict) -> dict[str, Any]:
        """paramiko connect() arguments: key file, IdentitiesOnly, and a timeout for each connect phase."""
        kwargs: dict[str, Any] = {
            "banner_timeout": self.ssh.connect_timeout,
            "auth_timeout": self.ssh.connect_timeout,
            "channel_timeout": self.ssh.connect_timeout,
        }
        if str(looked_up.get("identitiesonly", "no")).lower() == "yes":
            kwargs.update(allow_agent=False, look_for_keys=False)
        if identity_file:
            path = self._resolve(identity_file)
            key = self._private_key(path)
            if key is not None:
                kwargs["pkey"] = key
            else:
                kwargs["key_filename"] = [str(path)]
        kwargs["transport_factory"] = GcmFirstTransport
        return kwargs

    def _private_key(self, path: Path) -> paramiko.PKey | None:
        """The key at PATH (and its `-cert.pub`), read once per transport and reused while the file is unchanged;
        None when it cannot be read without help (a passphrase: paramiko then reports why, from the file)."""
        stamp = _stamp(path)
        with self._lock:
            cached = self._keys.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
        try:
            key = paramiko.PKey.from_path(path)
            cert = Path(f"{path}-cert.pub")
            if cert.is_file():
                key.load_certificate(str(cert))
        except (OSError, ValueError, paramiko.SSHException):
            return None
        with self._lock:
            self._keys[path] = (stamp, key)
        return key


def _stamp(path: Path) -> tuple[float, int] | None:
    """A known_hosts file's modification time and size (None when missing), to notice edits."""
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_mtime, info.st_size)
