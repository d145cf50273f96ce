"""The SSH transport: one cached fabric `Connection` per node, bounded parallelism, strict host keys."""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fabric
import paramiko
from fabric.connection import derive_shorthand
from paramiko.ssh_exception import NoValidConnectionsError

from reconciler.desired.inventory import NodeSpec
from reconciler.model import SSHDefaults
from reconciler.transport.agent import AgentChannel, AgentExited, AgentTimeout
from reconciler.transport.base import BaseTransport, CommandResult
from reconciler.transport.bounds import too_large_error
from reconciler.transport.hostkeys import (
    HostKeyCheck,
    HostKeyRefused,
    KnownHosts,
    enforce,
    known_hosts_name,
    refusal,
    unverifiable_algorithms,
)
from reconciler.transport.session import (
    Outcome,
    SessionOpenError,
    open_channel,
    run_on_channel,
    wrap_command,
)
from reconciler.transport.sshconfig import CachedSSHConfig

KEEPALIVE_SECONDS = 30
# How long an open connection's reader thread waits for a packet before it wakes to look at its state (closed?
# keepalive due? rekey asked?). paramiko waits 0.1 s, which suits its handshake; an open, idle connection woke 10
# times a second, a few dozen microseconds of Python each: with every node's connection open through a plan (and
# the daemon's all the time), that cost grew with nodes x seconds, i.e. with N^2 for a plan. Set once connected.
IDLE_WAKE_SECONDS = 2.0

# paramiko's transport thread logs a failed handshake (an sshd killed, a peer hanging up before its banner) at
# ERROR with its traceback; with no handler configured, Python's last-resort handler printed that traceback on the
# CLI's and the daemon's stderr. The failure reaches the caller as a one-line reason naming the node (explain()).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class ConnectError(Exception):
    """A node could not be reached: the message says why (network, auth, host key, timeout)."""


class ConnectionLost(ConnectError):
    """The connection dropped while a command ran: whether the command took effect is unknown."""


class PollProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand, reading with poll(2) instead of select(2).

    select() cannot watch a descriptor numbered 1024 or more, so with a ProxyCommand per node a plan of a few
    hundred nodes (each connection kept open: a socket pair and pipes) failed with "filedescriptor out of range
    in select()"; poll() has no such limit.
    """

    @classmethod
    def adopt(cls, proxy: paramiko.ProxyCommand) -> PollProxyCommand:
        """The same running command, read with poll."""
        proxy.__class__ = cls
        return proxy  # type: ignore[return-value]

    def recv(self, size: int) -> bytes:
        """Read up to SIZE bytes of the command's stdout, within the timeout."""
        buffer = b""
        start = time.monotonic()
        stdout = self.process.stdout
        assert stdout is not None
        poller = select.poll()
        poller.register(stdout.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while len(buffer) < size:
                wait_ms = None
                if self.timeout is not None:
                    left = self.timeout - (time.monotonic() - start)
                    if left <= 0:
                        raise TimeoutError()
                    wait_ms = max(1, int(left * 1000))
                if poller.poll(wait_ms):
                    chunk = os.read(stdout.fileno(), size - len(buffer))
                    if not chunk:
                        break  # the command exited: what was read is all there is
                    buffer += chunk
            return buffer
        except TimeoutError:
            if buffer:
                return buffer
            raise
        except OSError as exc:
            raise paramiko.ProxyCommandFailure(" ".join(self.cmd), exc.strerror) from exc


class GcmFirstTransport(paramiko.Transport):
    """paramiko's Transport offering AES-GCM (AEAD) before its default AES-CTR + HMAC; every cipher is still offered.

    With a MAC cipher, paramiko compares every packet's MAC in a byte-by-byte Python loop
    (`util.constant_time_bytes_eq`): ~15% of a cold plan's client CPU. AES-GCM needs no MAC (OpenSSH has it since
    6.2; OpenSSH's own order puts it after chacha20-poly1305, which paramiko lacks).
    """

    _preferred_ciphers = tuple(c for c in paramiko.Transport._preferred_ciphers if "gcm" in c) + tuple(
        c for c in paramiko.Transport._preferred_ciphers if "gcm" not in c)


class _Connection(fabric.Connection):
    """A fabric Connection with a thread-safe `open` and a bastion channel honouring the connect timeout."""

    # real attributes: invoke's DataProxy would turn any other attribute set into a config key
    _open_lock: threading.Lock | None = None
    shared = False
    host_key_check: HostKeyCheck | None = None
    open_failure: Exception | None = None

    def __init__(self, *args: Any, shared: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open_lock = threading.Lock()
        self.shared = shared  # a bastion shared by many nodes: opened once, a failure remembered
        self.host_key_check = None
        self.open_failure = None

    def open(self) -> Any:
        """Open once, even when several threads share this connection (a bastion)."""
        assert self._open_lock is not None
        with self._open_lock:
            if self.open_failure is not None:
                raise self.open_failure
            try:
                return super().open()
            except Exception as exc:
                if self.shared:
                    self.open_failure = exc
                raise

    def open_gateway(self) -> Any:
        """Open the channel through the bastion with a timeout (fabric would wait up to an hour)."""
        if not isinstance(self.gateway, fabric.Connection):
            proxy = super().open_gateway()
            return PollProxyCommand.adopt(proxy) if isinstance(proxy, paramiko.ProxyCommand) else proxy
        try:
            self.gateway.open()
        except Exception as exc:
            reason = explain(self.gateway, exc, self.connect_timeout)
            host_key = isinstance(exc, HostKeyRefused | paramiko.BadHostKeyException)
            raise ConnectError(reason if host_key else f"via bastion: {reason}") from exc
        try:
            return self.gateway.transport.open_channel(
                kind="direct-tcpip", dest_addr=(self.host, int(self.port)), src_addr=("", 0),
                timeout=self.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise ConnectError(f"cannot connect to {_where(self)}: the bastion says: {_reason(exc)}") from exc


class SSHTransport(BaseTransport):
    """Runs commands on nodes over SSH, as root (through `sudo -n` for other users)."""

    def __init__(self, ssh: SSHDefaults, base_dir: Path, *, forks: int | None = None, agents: bool = False) -> None:
        super().__init__(forks or ssh.forks)
        self.agents = agents  # the daemon's persistent transport: keep a fact agent running per node
        self.ssh = ssh
        self.base_dir = Path(base_dir)
        self.connects: dict[str, int] = {}
        self._ssh_config = self._load_ssh_config()
        self._connections: dict[str, _Connection] = {}
        self._failures: dict[str, str] = {}
        self._gateways: dict[tuple[str, str | None], _Connection] = {}
        self._known: dict[Path, KnownHosts] = {}
        self._node_locks: dict[str, threading.Lock] = {}
        self._last_used: dict[str, float] = {}
        self._known_stamp: dict[Path, tuple[float, int] | None] = {}
        self._agents: dict[str, AgentChannel] = {}
        self._agent_locks: dict[str, threading.Lock] = {}
        self._keys: dict[Path, tuple[tuple[float, int] | None, paramiko.PKey]] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------ public API

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None, retry_lost: bool = False) -> CommandResult:
        """Run a shell command on a node as root; connection problems and timeouts come back as `error`.

        RETRY_LOST (idempotent commands only, e.g. fact gathering): a command whose connection dropped while
        it ran is sent once more on a fresh connection. Other commands are never repeated: the loss is reported.
        """
        start = time.monotonic()
        limit = float(timeout if timeout is not None else self.ssh.command_timeout)
        data = stdin.encode("utf-8") if stdin is not None else None
        try:
            cxn = self._connection(node)
            try:
                outcome = self._execute(node, cxn, wrap_command(command, cxn.user), data, limit)
            except ConnectionLost:
                if not retry_lost:
                    raise
                cxn = self._connection(node)
                outcome = self._execute(node, cxn, wrap_command(command, cxn.user), data, limit)
        except ConnectError as exc:
            return CommandResult(node.name, None, "", "", time.monotonic() - start, error=str(exc))
        stdout = outcome.stdout.decode("utf-8", errors="replace")
        stderr = outcome.stderr.decode("utf-8", errors="replace")
        error = None
        if outcome.too_large:
            error = too_large_error()
        elif outcome.timed_out:
            error = f"command timed out after {limit:g}s"
        elif outcome.exit_code is None:
            error = "no exit status: the command was killed by a signal or its session ended"
        return CommandResult(node.name, outcome.exit_code, stdout, stderr, time.monotonic() - start, error)

    def ask(self, node: NodeSpec, command: str, line: str, *, timeout: float | None = None) -> CommandResult:
        """Ask the node's running COMMAND one line (starting it if needed); the answer line is the stdout.

        Idempotent questions only: an agent that had answered before and is found gone (its connection dropped,
        the node rebooted) is started again and asked once more. One that exits before its first answer is
        reported with its exit code and stderr (e.g. 127: no python3), like a command that failed.
        """
        start = time.monotonic()
        limit = float(timeout if timeout is not None else self.ssh.command_timeout)
        with self._agent_lock(node.name):
            for attempt in (1, 2):
                try:
                    agent = self._agent(node, command)
                except ConnectError as exc:
                    return CommandResult(node.name, None, "", "", time.monotonic() - start, error=str(exc))
                self.count_round_trip(node.name)
                try:
                    answer = agent.ask(line.encode("utf-8"), limit)
                except AgentTimeout:
                    self._forget_agent(node.name, agent)
                    return CommandResult(node.name, None, "", "", time.monotonic() - start,
                                         error=f"command timed out after {limit:g}s")
                except AgentExited as exc:
                    self._forget_agent(node.name, agent)
                    if exc.answered and attempt == 1:
                        continue
                    if exc.exit_code is None:
                        return CommandResult(node.name, None, "", exc.stderr, time.monotonic() - start,
                                             error=f"the fact agent on {node.name} ended: {exc}")
                    return CommandResult(node.name, exc.exit_code, "", exc.stderr, time.monotonic() - start)
                return CommandResult(node.name, 0, answer.decode("utf-8", errors="replace"), "",
                                     time.monotonic() - start)
        raise AssertionError("unreachable")

    def ask_many(self, nodes: list[NodeSpec], command: str, line: Callable[[NodeSpec], str], *,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """`ask` on many nodes in parallel, at most `forks` at a time."""
        return self.map_nodes(nodes, lambda spec: self.ask(spec, command, line(spec), timeout=timeout))

    def agent_count(self) -> int:
        """How many agents are running (started and not known to be gone)."""
        with self._lock:
            return sum(1 for agent in self._agents.values() if agent.alive)

    def close(self) -> None:
        """Close every agent, node connection and bastion connection."""
        with self._lock:
            connections = list(self._connections.values())
            gateways = list(self._gateways.values())
            agents = list(self._agents.values())
            self._connections.clear()
            self._gateways.clear()
            self._agents.clear()
        for agent in agents:
            agent.close()
        for cxn in connections:
            _close_quietly(cxn)
        for gateway in gateways:
            gateway.shared = False
            _close_quietly(gateway)

    def forget(self, node: str) -> None:
        """Drop a node's connection and remembered failure, so the next command connects afresh."""
        with self._lock:
            cxn = self._connections.pop(node, None)
            self._failures.pop(node, None)
            agent = self._agents.pop(node, None)
        if agent is not None:
            agent.close()
        if cxn is not None:
            _close_quietly(cxn)

    def connection(self, node: NodeSpec) -> fabric.Connection:
        """The node's open fabric Connection (for file transfer); raises ConnectError when unreachable."""
        return self._connection(node)

    # ------------------------------------------------------------ a long-lived transport (the daemon's)

    def new_cycle(self) -> None:
        """Forget remembered connect failures (nodes and bastions) so that this cycle tries them again."""
        with self._lock:
            self._failures.clear()
            broken = [key for key, gw in self._gateways.items() if gw.open_failure is not None or
                      (gw.transport is not None and not gw.is_connected)]
            gateways = [self._gateways.pop(key) for key in broken]
        for gateway in gateways:
            gateway.shared = False
            _close_quietly(gateway)

    def close_idle(self, max_idle: float) -> list[str]:
        """Close the node connections unused for more than MAX_IDLE seconds (and bastions left unused); their names."""
        now = time.monotonic()
        with self._lock:
            idle = [name for name in self._connections if now - self._last_used.get(name, 0.0) > max_idle]
            closing = [self._connections.pop(name) for name in idle]
            agents = [self._agents.pop(name) for name in idle if name in self._agents]
            in_use = {id(cxn.gateway) for cxn in self._connections.values()}
            unused = [key for key, gw in self._gateways.items() if id(gw) not in in_use]
            gateways = [self._gateways.pop(key) for key in unused]
        for agent in agents:
            agent.close()
        for cxn in closing:
            _close_quietly(cxn)
        for gateway in gateways:
            gateway.shared = False
            _close_quietly(gateway)
        return idle

    def open_count(self) -> int:
        """How many node connections are open (cached and still active)."""
        with self._lock:
            return sum(1 for cxn in self._connections.values() if cxn.is_connected)

    def total_connects(self) -> int:
        """TCP/SSH connections opened to nodes so far (every reconnect counts)."""
        with self._lock:
            return sum(self.connects.values())

    # ------------------------------------------------------------ connections

    def _connection(self, node: NodeSpec) -> _Connection:
        """The node's cached open connection; connect on first use, once (a failure is remembered)."""
        with self._node_lock(node.name):
            failure = self._failures.get(node.name)
            if failure is not None:
                raise ConnectError(failure)
            self._last_used[node.name] = time.monotonic()
            cxn = self._connections.get(node.name)
            if cxn is not None and cxn.is_connected:
                return cxn
            if cxn is not None:  # a dead transport (keepalive or read failed): replace it, host key re-checked
                self._drop(node.name, cxn)
            try:
                cxn = self._open(node)
            except ConnectError as exc:
                self._failures[node.name] = str(exc)
                raise
            self._connections[node.name] = cxn
            return cxn

    def _execute(self, node: NodeSpec, cxn: _Connection, command: str, stdin: bytes | None,
                 limit: float) -> Outcome:
        """Run on the node's connection; the command is sent once and never repeated."""
        channel = self._channel(node, cxn)
        self.count_round_trip(node.name)
        try:
            outcome = run_on_channel(channel, command, stdin, limit)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self._drop(node.name, cxn)
            reason = f"connection to {_where(cxn)} lost during the command: {_reason(exc)}"
            raise ConnectionLost(reason) from exc
        transport = channel.get_transport()
        lost = outcome.exit_code is None and not outcome.timed_out and not outcome.too_large  # the bound is what to say
        if lost and not (transport and transport.is_active()):
            self._drop(node.name, cxn)  # the channel closed because the whole connection dropped
            raise ConnectionLost(f"connection to {_where(cxn)} lost during the command")
        return outcome

    def _channel(self, node: NodeSpec, cxn: _Connection) -> paramiko.Channel:
        """A session channel; if the cached connection went stale, reconnect once (nothing was sent yet)."""
        try:
            return open_channel(cxn.client.get_transport(), self.ssh.connect_timeout)
        except SessionOpenError:
            self._drop(node.name, cxn)
        cxn = self._connection(node)
        try:
            return open_channel(cxn.client.get_transport(), self.ssh.connect_timeout)
        except SessionOpenError as exc:
            self._drop(node.name, cxn)
            raise ConnectError(f"cannot open a session on {_where(cxn)}: {exc}") from exc

    def _drop(self, name: str, cxn: _Connection) -> None:
        """Forget a broken connection (not the node's failure record) and close it, with the agent on it."""
        with self._lock:
            if self._connections.get(name) is cxn:
                del self._connections[name]
            agent = self._agents.get(name)
            if agent is not None and agent.channel.get_transport() is cxn.client.get_transport():
                del self._agents[name]
            else:
                agent = None
        if agent is not None:
            agent.close()
        _close_quietly(cxn)

    def _agent(self, node: NodeSpec, command: str) -> AgentChannel:
        """The node's running agent for COMMAND, started on a new session channel when there is none alive."""
        with self._lock:
            agent = self._agents.get(node.name)
        if agent is not None and agent.alive and agent.command == command:
            self._last_used[node.name] = time.monotonic()
            return agent
        if agent is not None:
            self._forget_agent(node.name, agent)
        cxn = self._connection(node)
        channel = self._channel(node, cxn)
        try:
            agent = AgentChannel(channel, command, self.ssh.connect_timeout, exec_as=wrap_command(command, cxn.user))
        except (paramiko.SSHException, EOFError, OSError, AgentTimeout) as exc:
            channel.close()
            raise ConnectError(f"cannot start the fact agent on {_where(cxn)}: {_reason(exc)}") from exc
        with self._lock:
            self._agents[node.name] = agent
        return agent

    def _forget_agent(self, name: str, agent: AgentChannel) -> None:
        """Close an agent and forget it if it is still the node's."""
        with self._lock:
            if self._agents.get(name) is agent:
                del self._agents[name]
        agent.close()

    def _agent_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._agent_locks.setdefault(name, threading.Lock())

    def _node_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._node_locks.setdefault(name, threading.Lock())

    def _open(self, node: NodeSpec) -> _Connection:
        """Build, arm and open a connection to a node (through its bastion, if any)."""
        try:
            cxn = self._build(node)
        except (OSError, ValueError, paramiko.SSHException) as exc:
            raise ConnectError(f"cannot set up a connection to {node.name}: {_reason(exc)}") from exc
        with self._lock:
            self.connects[node.name] = self.connects.get(node.name, 0) + 1
        try:
            cxn.open()
            _verify_chain(cxn)
            transport = cxn.client.get_transport()
            transport.set_keepalive(KEEPALIVE_SECONDS)
            transport.sock.settimeout(IDLE_WAKE_SECONDS)  # handshake and authentication are over
        except Exception as exc:
            reason = explain(cxn, exc, self.ssh.connect_timeout)
            _close_quietly(cxn)
            raise ConnectError(reason) from exc
        return cxn

    def _build(self, node: NodeSpec) -> _Connection:
        """A Connection for a node: its user/port/key, ssh_config settings, bastion and host key check."""
        looked_up = self._ssh_config.lookup(node.host)
        cxn = _Connection(
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

    def _gateway(self, node: NodeSpec) -> _Connection:
        """The shared connection to a node's bastion (`[user@]host[:port]`), built once."""
        assert node.proxy_jump is not None
        key = (node.proxy_jump, node.identity_file)
        with self._lock:
            gateway = self._gateways.get(key)
            if gateway is None:
                gateway = self._gateways[key] = self._build_gateway(node.proxy_jump, node.identity_file)
            return gateway

    def _build_gateway(self, jump: str, identity_file: str | None) -> _Connection:
        """A connection to a bastion; its own user/port come from the jump string, ssh_config, or `ssh:`."""
        parts = derive_shorthand(jump)
        looked_up = self._ssh_config.lookup(parts["host"])
        gateway = _Connection(
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


def explain(cxn: fabric.Connection, exc: Exception, connect_timeout: float) -> str:
    """A one-line reason why connecting failed, naming the host and the cause."""
    if isinstance(exc, HostKeyRefused | ConnectError):
        return str(exc)
    if isinstance(exc, paramiko.BadHostKeyException):
        check = _check_for(cxn, exc.hostname)
        return str(refusal(exc, check)) if check else f"HOST KEY CHANGED for {exc.hostname}: refusing"
    if isinstance(exc, paramiko.SSHException) and "no acceptable host key" in str(exc):
        check = _check_for(cxn, cxn.host)  # only key types known for the host were offered (see _arm_chain)
        if check and check.known.lookup(check.name):
            return check.no_common_type_message()
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed for {cxn.user}@{_where(cxn)}: {_reason(exc)}"
    if isinstance(exc, TimeoutError):
        return f"connect to {_where(cxn)} timed out after {connect_timeout:g}s"
    if isinstance(exc, paramiko.SSHException) and not _banner_seen(cxn):
        if isinstance(exc, paramiko.ProxyCommandFailure):  # its command ended: the far end hung up, no timeout
            return f"connect to {_where(cxn)}: the connection was closed before the SSH banner ({_reason(exc)})"
        if isinstance(exc.__context__, EOFError | ConnectionError):  # the peer hung up (FIN or RST): no timeout
            return f"connect to {_where(cxn)}: the connection was closed before the SSH banner"
        detail = "" if str(exc) == "No existing session" else f" ({_reason(exc)})"
        return f"connect to {_where(cxn)}: no SSH banner within {connect_timeout:g}s{detail}"
    if isinstance(exc, NoValidConnectionsError):
        reasons = sorted({getattr(err, "strerror", None) or str(err) for err in exc.errors.values()})
        return f"cannot connect to {_where(cxn)}: {'; '.join(reasons)}"
    return f"cannot connect to {_where(cxn)}: {_reason(exc)}"


def _stamp(path: Path) -> tuple[float, int] | None:
    """A known_hosts file's modification time and size (None when missing), to notice edits."""
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_mtime, info.st_size)


def _verify_chain(cxn: fabric.Connection) -> None:
    """After the handshakes: refuse if the node or a bastion presented a key marked `@revoked`."""
    hop: Any = cxn
    while isinstance(hop, fabric.Connection):
        check: HostKeyCheck | None = getattr(hop, "host_key_check", None)
        if check is not None and hop.transport is not None:
            check.verify(hop.transport.get_remote_server_key())
        hop = hop.gateway


def _banner_seen(cxn: fabric.Connection) -> bool:
    """Whether the server said hello (sent its SSH version line) before things went wrong."""
    transport = cxn.client.get_transport()
    return transport is None or bool(transport.remote_version)


def _check_for(cxn: Any, host: str) -> HostKeyCheck | None:
    """The host key check of the hop (the node or one of its bastions) whose host is `host`."""
    hop = cxn
    while isinstance(hop, fabric.Connection):
        if hop.host == host:
            return getattr(hop, "host_key_check", None)
        hop = hop.gateway
    return None


def _where(cxn: fabric.Connection) -> str:
    """`host:port`, plus the bastion or proxy command it goes through."""
    via = ""
    if isinstance(cxn.gateway, fabric.Connection):
        via = f" via {cxn.gateway.host}:{cxn.gateway.port}"
    elif isinstance(cxn.gateway, str):
        via = f" via ProxyCommand {cxn.gateway!r}"
    return f"{cxn.host}:{cxn.port}{via}"


def _reason(exc: BaseException) -> str:
    """An exception as `Type: message` (message alone when the type says nothing more)."""
    if isinstance(exc, paramiko.ChannelException):
        return exc.text
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, paramiko.SSHException) else f"{type(exc).__name__}: {text}"


def _close_quietly(cxn: fabric.Connection) -> None:
    """Close a connection and the bastion hops only it uses (not a shared bastion), ignoring errors."""
    hop: Any = cxn
    while isinstance(hop, fabric.Connection) and not getattr(hop, "shared", False):
        try:
            hop.client.close()
            hop.transport = None
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        hop = hop.gateway


class IdempotentCommands(BaseTransport):
    """A view of an SSHTransport for commands safe to repeat (fact gathering): a dropped connection is retried once."""

    def __init__(self, inner: SSHTransport) -> None:
        super().__init__(inner.forks)
        self.inner = inner
        self.round_trips = inner.round_trips
        self.agents = inner.agents

    def ask_many(self, nodes: list[NodeSpec], command: str, line: Callable[[NodeSpec], str], *,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """The inner transport's agents (their questions are idempotent by contract)."""
        return self.inner.ask_many(nodes, command, line, timeout=timeout)

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        """Run on the inner transport, once more on a fresh connection if the connection dropped."""
        return self.inner.run(node, command, stdin=stdin, timeout=timeout, retry_lost=True)

    def close(self) -> None:
        """Nothing: the inner transport's owner closes it."""


def for_idempotent(transport: Any) -> Any:
    """The transport to use for idempotent commands: a retrying view of an SSHTransport, else itself."""
    if isinstance(transport, SSHTransport):
        return IdempotentCommands(transport)
    if hasattr(transport, "with_inner"):  # a leader's FencingTransport: fenced over the retrying view
        return transport.with_inner(for_idempotent)
    return transport
