"""The SSH transport: one cached fabric `Connection` per node, bounded parallelism, strict host keys.

Connections are built by sshbuild.py (settings, ssh_config, bastions, host keys) from sshconnection.py's classes;
why one failed is said by ssherrors.py; the retrying view for idempotent commands is in idempotent.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import fabric
import paramiko

from reconciler.desired.inventory import NodeSpec
from reconciler.model import SSHDefaults
from reconciler.transport.agent import AgentChannel, AgentExited, AgentTimeout
from reconciler.transport.base import BaseTransport, CommandResult
from reconciler.transport.bounds import too_large_error
from reconciler.transport.session import (
    Outcome,
    SessionOpenError,
    open_channel,
    run_on_channel,
    wrap_tracked,
)
from reconciler.transport.sshbuild import ConnectionFactory
from reconciler.transport.sshconnection import NodeConnection, close_quietly, verify_chain
from reconciler.transport.ssherrors import (
    ConnectError,
    ConnectionLost,
    NoBanner,
    before_banner,
    explain,
    reason,
    where,
)

KEEPALIVE_SECONDS = 30
NO_BANNER_PAUSE = 1.0  # seconds before the second connect to a node that sent no SSH banner
# How long an open connection's reader thread waits for a packet before it wakes to look at its state (closed?
# keepalive due? rekey asked?). paramiko waits 0.1 s, which suits its handshake; an open, idle connection woke 10
# times a second, a few dozen microseconds of Python each: with every node's connection open through a plan (and
# the daemon's all the time), that cost grew with nodes x seconds, i.e. with N^2 for a plan. Set once connected.
IDLE_WAKE_SECONDS = 2.0


class SSHTransport(BaseTransport):
    """Runs commands on nodes over SSH, as root (through `sudo -n` for other users)."""

    def __init__(self, ssh: SSHDefaults, base_dir: Path, *, forks: int | None = None, agents: bool = False) -> None:
        super().__init__(forks or ssh.forks)
        self.agents = agents  # the daemon's persistent transport: keep a fact agent running per node
        self.ssh = ssh
        self.base_dir = Path(base_dir)
        self.connects: dict[str, int] = {}
        self._lock = threading.RLock()
        self._factory = ConnectionFactory(ssh, self.base_dir, self._lock)  # reads ssh.config (once, here)
        self._connections: dict[str, NodeConnection] = {}
        self._failures: dict[str, str] = {}
        self._node_locks: dict[str, threading.Lock] = {}
        self._last_used: dict[str, float] = {}
        self._agents: dict[str, AgentChannel] = {}
        self._agent_locks: dict[str, threading.Lock] = {}

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
                outcome = self._execute(node, cxn, wrap_tracked(command, cxn.user), data, limit)
            except ConnectionLost:
                if not retry_lost:
                    raise
                cxn = self._connection(node)
                outcome = self._execute(node, cxn, wrap_tracked(command, cxn.user), data, limit)
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
            gateways = self._factory.take_gateways()
            agents = list(self._agents.values())
            self._connections.clear()
            self._agents.clear()
        for agent in agents:
            agent.close()
        for cxn in connections:
            close_quietly(cxn)
        for gateway in gateways:
            gateway.shared = False
            close_quietly(gateway)

    def forget(self, node: str) -> None:
        """Drop a node's connection and remembered failure, so the next command connects afresh."""
        with self._lock:
            cxn = self._connections.pop(node, None)
            self._failures.pop(node, None)
            agent = self._agents.pop(node, None)
        if agent is not None:
            agent.close()
        if cxn is not None:
            close_quietly(cxn)

    def connection(self, node: NodeSpec) -> fabric.Connection:
        """The node's open fabric Connection (for file transfer); raises ConnectError when unreachable."""
        return self._connection(node)

    # ------------------------------------------------------------ a long-lived transport (the daemon's)

    def new_cycle(self) -> None:
        """Forget remembered connect failures (nodes and bastions) so that this cycle tries them again."""
        with self._lock:
            self._failures.clear()
            gateways = self._factory.take_gateways(lambda gw: gw.open_failure is not None or
                                                   (gw.transport is not None and not gw.is_connected))
        for gateway in gateways:
            gateway.shared = False
            close_quietly(gateway)

    def close_idle(self, max_idle: float) -> list[str]:
        """Close the node connections unused for more than MAX_IDLE seconds (and bastions left unused); their names."""
        now = time.monotonic()
        with self._lock:
            idle = [name for name in self._connections if now - self._last_used.get(name, 0.0) > max_idle]
            closing = [self._connections.pop(name) for name in idle]
            agents = [self._agents.pop(name) for name in idle if name in self._agents]
            in_use = {id(cxn.gateway) for cxn in self._connections.values()}
            gateways = self._factory.take_gateways(lambda gw: id(gw) not in in_use)
        for agent in agents:
            agent.close()
        for cxn in closing:
            close_quietly(cxn)
        for gateway in gateways:
            gateway.shared = False
            close_quietly(gateway)
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

    def _connection(self, node: NodeSpec) -> NodeConnection:
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
                cxn = self._open_twice(node)
            except NoBanner as exc:
                self._failures[node.name] = f"{exc} (twice)"
                raise ConnectError(self._failures[node.name]) from exc
            except ConnectError as exc:
                self._failures[node.name] = str(exc)
                raise
            self._connections[node.name] = cxn
            return cxn

    def _execute(self, node: NodeSpec, cxn: NodeConnection, command: str, stdin: bytes | None,
                 limit: float) -> Outcome:
        """Run on the node's connection; the command is sent once and never repeated."""
        channel = self._channel(node, cxn)
        self.count_round_trip(node.name)
        try:
            outcome = run_on_channel(channel, command, stdin, limit)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self._drop(node.name, cxn)
            why = f"connection to {where(cxn)} lost during the command: {reason(exc)}"
            raise ConnectionLost(why) from exc
        transport = channel.get_transport()
        lost = outcome.exit_code is None and not outcome.timed_out and not outcome.too_large  # the bound is what to say
        if lost and not (transport and transport.is_active()):
            self._drop(node.name, cxn)  # the channel closed because the whole connection dropped
            raise ConnectionLost(f"connection to {where(cxn)} lost during the command")
        return outcome

    def _channel(self, node: NodeSpec, cxn: NodeConnection) -> paramiko.Channel:
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
            raise ConnectError(f"cannot open a session on {where(cxn)}: {exc}") from exc

    def _drop(self, name: str, cxn: NodeConnection) -> None:
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
        close_quietly(cxn)

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
            agent = AgentChannel(channel, command, self.ssh.connect_timeout, exec_as=wrap_tracked(command, cxn.user))
        except (paramiko.SSHException, EOFError, OSError, AgentTimeout) as exc:
            channel.close()
            raise ConnectError(f"cannot start the fact agent on {where(cxn)}: {reason(exc)}") from exc
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

    def _open_twice(self, node: NodeSpec) -> NodeConnection:
        """_open, once more after a pause when the node sent no banner (an overloaded sshd: nothing was sent)."""
        try:
            return self._open(node)
        except NoBanner:
            pass  # the second try outside this handler: its error must not carry the first as its context
        time.sleep(NO_BANNER_PAUSE)
        return self._open(node)

    def _open(self, node: NodeSpec) -> NodeConnection:
        """Build, arm and open a connection to a node (through its bastion, if any)."""
        try:
            cxn = self._factory.build(node)
        except (OSError, ValueError, paramiko.SSHException) as exc:
            raise ConnectError(f"cannot set up a connection to {node.name}: {reason(exc)}") from exc
        with self._lock:
            self.connects[node.name] = self.connects.get(node.name, 0) + 1
        try:
            cxn.open()
            verify_chain(cxn)
            transport = cxn.client.get_transport()
            transport.set_keepalive(KEEPALIVE_SECONDS)
            transport.sock.settimeout(IDLE_WAKE_SECONDS)  # handshake and authentication are over
        except Exception as exc:
            why = explain(cxn, exc, self.ssh.connect_timeout)
            silent = before_banner(cxn, exc)
            close_quietly(cxn)
            raise (NoBanner if silent else ConnectError)(why) from exc
        return cxn
