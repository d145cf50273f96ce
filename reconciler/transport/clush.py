"""The ClusterShell transport: nodes behind `ssh.gateways` are reached through ClusterShell's tree mode.

The nodes behind a gateway get one ClusterShell TreeWorker per distinct command: the root connects to each
gateway with OpenSSH, the gateway runs ClusterShell's Gateway (``python3 -m ClusterShell.Gateway``) and
fans out to its nodes with OpenSSH. Every other node (the gateways themselves included) goes through the
direct transport (SSHTransport). The ssh options are the same at every hop, so the ssh_config, known_hosts
and identity paths of the inventory must exist on the gateways too; host keys are checked by OpenSSH with
``StrictHostKeyChecking=yes`` (``accept-new`` for that policy) against that one known_hosts file.

Semantics match SSHTransport: commands run as root through ``sh -c`` (``sudo -n`` for another user),
stdin reaches the command (base64 in the command line, at most MAX_STDIN bytes), and a result without
an exit code is an unreachable node. The exit code is
taken from a marker line the wrapped command prints last on stderr, so a node whose ssh (or gateway) failed
is never mistaken for a command that exited 255. ClusterShell is line-oriented: output comes back as lines,
each ended by a newline (a missing final newline is added). Output is bounded as on the direct transport: a
node's stdout past MAX_OUTPUT is refused (cut on the node, and never held past the bound here), and only the end
of its stderr is kept. A node whose ssh ended before authentication (no banner within ConnectTimeout, sshd's
MaxStartups drop: an overloaded node, and the command never started) is tried once more after RETRY_PAUSE; one
that fails so twice is reported with OpenSSH's words and "twice".
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from ClusterShell.Event import EventHandler
from ClusterShell.NodeSet import NodeSet
from ClusterShell.Task import Task, task_self
from ClusterShell.Topology import TopologyGraph

from reconciler.common import hostlist
from reconciler.desired.inventory import NodeSpec
from reconciler.model import SSHDefaults, netnames
from reconciler.transport.base import BaseTransport, CommandFor, CommandResult, StdinFor, Transport
from reconciler.transport.bounds import MAX_OUTPUT, BoundedOutput, too_large_error
from reconciler.transport.session import wrap_command
from reconciler.transport.ssh import SSHTransport

ROOT = "reconciler-root"  # the root of the topology: this process (never connected to)
# OpenSSH's words for a connection that ended before authentication, so before the command could start: an
# overloaded node (sshd's MaxStartups drops, a banner late past ConnectTimeout) is tried once more, any command
_BEFORE_AUTH = re.compile(r"during banner exchange|kex_exchange_identification|^ssh: connect to host .*: "
                          r"Connection timed out|Connection (reset|closed) by .* port \d+\s*$", re.MULTILINE)
RETRY_PAUSE = 1.0  # seconds before the second try of the nodes whose connection ended before authentication
RC_MARKER = "__reconciler_rc__="
_RC_LINE = re.compile(rf"^(.*){re.escape(RC_MARKER)}(\d+)$")


class ClushTransport(BaseTransport):
    """Runs commands on nodes behind gateways with ClusterShell (tree mode), on the others directly."""

    max_output = MAX_OUTPUT  # bytes of stdout a node may return

    def __init__(self, ssh: SSHDefaults, base_dir: Path, *, forks: int | None = None,
                 direct: Transport | None = None) -> None:
        super().__init__(forks or ssh.forks)
        self.ssh = ssh
        self.base_dir = Path(base_dir)
        self.direct = direct if direct is not None else SSHTransport(ssh, self.base_dir, forks=forks)
        self.behind = {node: gw.name for gw in ssh.gateways for node in hostlist.expand(gw.nodes)}
        self._lock = threading.Lock()  # ClusterShell's task registry and os.environ are shared by threads

    # ------------------------------------------------------------ public API

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        """Run one command on one node (through its gateway when it has one)."""
        if node.name not in self.behind:
            return self.direct.run(node, command, stdin=stdin, timeout=timeout)
        return self._clush([node], command, stdin, timeout)[node.name]

    def run_many(self, nodes: list[NodeSpec], command: CommandFor, *, stdin: StdinFor = None,
                 timeout: float | None = None) -> dict[str, CommandResult]:
        """Nodes behind gateways in one ClusterShell run, the others through the direct transport, at once."""
        unique: dict[str, NodeSpec] = {}
        for spec in nodes:
            unique.setdefault(spec.name, spec)
        tree = [s for s in unique.values() if s.name in self.behind]
        direct = [s for s in unique.values() if s.name not in self.behind]
        results: dict[str, CommandResult] = {}
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="direct") as pool:
            pending = pool.submit(self.direct.run_many, direct, command, stdin=stdin, timeout=timeout) \
                if direct else None
            groups: dict[tuple[str, str | None], list[NodeSpec]] = {}
            for spec in tree:
                try:
                    cmd = command(spec) if callable(command) else command
                    data = stdin(spec) if callable(stdin) else stdin
                except Exception as exc:  # noqa: BLE001 - one node's failure must not abort the others
                    error = f"internal error: {type(exc).__name__}: {exc}"
                    results[spec.name] = CommandResult(spec.name, None, "", "", 0.0, error=error)
                    continue
                if cmd is not None:
                    groups.setdefault((cmd, data), []).append(spec)
            if groups:
                results.update(self._clush_groups(groups, timeout))
            if pending is not None:
                results.update(pending.result())
        return results

    def close(self) -> None:
        """Close the direct transport's connections (ClusterShell keeps none between runs)."""
        self.direct.close()

    # ------------------------------------------------------------ ClusterShell

    def _clush(self, nodes: list[NodeSpec], command: str, stdin: str | None,
               timeout: float | None) -> dict[str, CommandResult]:
        """One command on nodes behind gateways."""
        return self._clush_groups({(command, stdin): nodes}, timeout)

    def _clush_groups(self, groups: dict[tuple[str, str | None], list[NodeSpec]],
                      timeout: float | None) -> dict[str, CommandResult]:
        """Run each (command, stdin) group on its nodes: one ClusterShell task per gateway, all at once.

        A task per gateway (each in its own thread: ClusterShell tasks are per thread) keeps a gateway's
        failure to its own nodes: ClusterShell would otherwise try to reroute them and abort the whole run.
        """
        limit = float(timeout if timeout is not None else self.ssh.command_timeout)
        results = self._gateways_once(groups, limit)
        again = {name for name, result in results.items() if before_auth(result)}
        if not again:
            return results
        time.sleep(RETRY_PAUSE)
        retry = {key: kept for key, specs in groups.items() if (kept := [s for s in specs if s.name in again])}
        for name, result in self._gateways_once(retry, limit).items():
            if before_auth(result):
                result = replace(result, error=f"{result.error} (twice: connection ended before authentication)")
            results[name] = result
        return results

    def _gateways_once(self, groups: dict[tuple[str, str | None], list[NodeSpec]],
                       limit: float) -> dict[str, CommandResult]:
        """One pass of the groups: a ClusterShell task per gateway, each in its thread."""
        by_gateway: dict[str, dict[tuple[str, str | None], list[NodeSpec]]] = {}
        for key, specs in groups.items():
            for spec in specs:
                by_gateway.setdefault(self.behind[spec.name], {}).setdefault(key, []).append(spec)
        results: dict[str, CommandResult] = {}
        with ThreadPoolExecutor(max_workers=len(by_gateway), thread_name_prefix="clush") as pool:
            futures = {gw: pool.submit(self._through_gateway, part, limit) for gw, part in by_gateway.items()}
            for gateway, future in futures.items():
                try:
                    results.update(future.result())
                except Exception as exc:  # noqa: BLE001 - the gateway failed: all its nodes are unreachable
                    why = f"unreachable: gateway {gateway} failed and ClusterShell has no other route ({exc})"
                    for specs in by_gateway[gateway].values():
                        for spec in specs:
                            results[spec.name] = CommandResult(spec.name, None, "", "", 0.0, error=why)
        return results

    def _through_gateway(self, groups: dict[tuple[str, str | None], list[NodeSpec]],
                         limit: float) -> dict[str, CommandResult]:
        """One ClusterShell task (this thread's) running every group on nodes behind one gateway."""
        with self._lock:  # configuring is quick; the runs themselves overlap
            task = task_self()
            self._configure(task, [s for specs in groups.values() for s in specs])
        start = time.monotonic()
        workers = []
        for (command, data), specs in groups.items():
            by_host = {s.host: s for s in specs}
            # `head` ends a node's endless output on the node (the command then gets SIGPIPE), as closing the
            # channel does on the direct transport; the collector bounds what is held here whatever the node does
            wrapped = (f"{{ {with_stdin(wrap_command(command, specs[0].user), data)}; echo {RC_MARKER}$? >&2; }}"
                       f" | head -c {self.max_output + 1}")
            collector = OutputCollector(self.max_output)
            worker = task.shell(wrapped, nodes=str(NodeSet.fromlist(by_host)), stderr=True, timeout=limit,
                                tree=True, handler=collector)
            workers.append((worker, collector, by_host))
            for spec in specs:
                self.count_round_trip(spec.name)
        task.run()
        duration = time.monotonic() - start
        results = {}
        for worker, collector, by_host in workers:
            timed_out = {str(n) for n in worker.iter_keys_timeout()}
            for host, spec in by_host.items():
                output = collector.outputs.get(host) or BoundedOutput(self.max_output)
                results[spec.name] = self._result(worker, output, host, spec, host in timed_out, limit, duration)
        return results

    def _configure(self, task: Task, specs: list[NodeSpec]) -> None:
        """Topology (root -> gateways -> their nodes), OpenSSH options and fan-out for this run."""
        graph = TopologyGraph()
        gateways: dict[str, list[str]] = {}
        for spec in specs:  # OpenSSH puts no `--` before ClusterShell's destination: never let one be an option
            netnames.host(spec.host)
            netnames.host(self.behind[spec.name])
            gateways.setdefault(self.behind[spec.name], []).append(spec.host)
        graph.add_route(NodeSet(ROOT), NodeSet.fromlist(gateways))
        for gateway, hosts in gateways.items():
            graph.add_route(NodeSet(gateway), NodeSet.fromlist(hosts))
        task.topology = graph.to_tree(ROOT)
        task.router = None  # a fresh router: forget gateways marked unreachable by an earlier run
        users = {s.user for s in specs}
        if len(users) > 1 or any(s.port != self.ssh.port or s.proxy_jump for s in specs):
            raise ValueError("nodes behind ClusterShell gateways must share ssh.user and ssh.port, "
                             "without proxy_jump")
        task.set_info("ssh_user", users.pop())
        task.set_info("ssh_options", " ".join(shlex.quote(o) for o in self.ssh_options(specs[0])))
        task.set_info("connect_timeout", self.ssh.connect_timeout)
        task.set_info("command_timeout", 0)
        task.set_info("fanout", self.forks)
        task.set_default("stdout_msgtree", False)  # ClusterShell's own buffers have no bound: OutputCollector's do
        task.set_default("stderr_msgtree", False)
        os.environ.setdefault("CLUSTERSHELL_GW_PYTHON_EXECUTABLE", "python3")

    def ssh_options(self, spec: NodeSpec) -> list[str]:
        """OpenSSH options of every hop: the inventory's ssh_config, key, port and strict host keys."""
        opts = []
        if self.ssh.config:
            opts += ["-F", str(self._resolve(self.ssh.config))]
        if spec.identity_file:
            opts += ["-i", str(self._resolve(spec.identity_file)), "-o", "IdentitiesOnly=yes"]
        if spec.port != 22:
            opts += ["-p", str(spec.port)]
        strict = "accept-new" if self.ssh.host_key_policy == "accept-new" else "yes"
        opts += ["-o", f"StrictHostKeyChecking={strict}"]
        if self.ssh.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={self._resolve(self.ssh.known_hosts)}",
                     "-o", "GlobalKnownHostsFile=/dev/null"]
        return opts

    def _resolve(self, path: str) -> Path:
        """A path from the desired state: `~` expanded, relative to the desired-state directory."""
        expanded = Path(path).expanduser()
        return expanded if expanded.is_absolute() else (self.base_dir / expanded).resolve()

    def _result(self, worker: object, output: BoundedOutput, host: str, spec: NodeSpec, timed_out: bool,
                limit: float, duration: float) -> CommandResult:
        """A node's CommandResult from its collected output and the exit-code marker on stderr."""
        err_lines = bytes(output.stderr).decode("utf-8", errors="replace").splitlines()
        code = None
        if err_lines:
            match = _RC_LINE.match(err_lines[-1])
            if match:
                code = int(match.group(2))
                err_lines = err_lines[:-1] + ([match.group(1)] if match.group(1) else [])
        stderr = "".join(f"{line}\n" for line in err_lines)
        if output.too_large:  # whatever else happened: the node was cut off for it
            return CommandResult(spec.name, None, "", stderr, duration, error=too_large_error(self.max_output))
        stdout = bytes(output.stdout).decode("utf-8", errors="replace")
        if code is not None:
            return CommandResult(spec.name, code, stdout, stderr, duration)
        gateway = self.behind[spec.name]
        if timed_out:
            error = f"command timed out after {limit:g}s (through gateway {gateway})"
        else:
            try:
                rc = worker.node_retcode(host)  # type: ignore[attr-defined]
            except KeyError:
                rc = None
            why = err_lines[-1] if err_lines else f"exit {rc}" if rc is not None else "no answer"
            error = f"unreachable through gateway {gateway}: {why}"
        return CommandResult(spec.name, None, stdout, stderr, duration, error=error)


def before_auth(result: CommandResult) -> bool:
    """RESULT is a node whose ssh ended before authentication (the command never started): safe to try again."""
    return (result.exit_code is None and (result.error or "").startswith("unreachable through gateway")
            and _BEFORE_AUTH.search(result.stderr) is not None)


MAX_STDIN = 64 * 1024  # stdin travels in the command line (base64), below Linux's 128 KiB per argument


def with_stdin(command: str, data: str | None) -> str:
    """COMMAND fed DATA on stdin, inside the command line itself (base64), or /dev/null without DATA.

    ClusterShell can write to a tree worker, but writes that reach a gateway before its ssh to the target
    has started are lost (the command then waits for stdin forever), so stdin rides in the command.
    """
    if data is None:
        return f"{command} </dev/null"
    raw = data.encode("utf-8")
    if len(raw) > MAX_STDIN:
        raise ValueError(f"stdin of {len(raw)} bytes is over the {MAX_STDIN} bytes a command through a "
                         "ClusterShell gateway can carry")
    return f"printf %s {base64.b64encode(raw).decode()} | base64 -d | {command}"


class OutputCollector(EventHandler):  # type: ignore[misc]
    """Each node's output lines as ClusterShell reads them, kept within the bounds (BoundedOutput), by host."""

    def __init__(self, max_output: int = MAX_OUTPUT) -> None:
        super().__init__()
        self.max_output = max_output
        self.outputs: dict[str, BoundedOutput] = {}

    def ev_read(self, worker: object, node: object, sname: str, msg: bytes) -> None:
        """One line from NODE (without its newline) on stream SNAME."""
        output = self.outputs.get(str(node))
        if output is None:
            output = self.outputs[str(node)] = BoundedOutput(self.max_output)
        if sname == "stderr":
            output.add_stderr(bytes(msg) + b"\n")
        else:
            output.add_stdout(bytes(msg) + b"\n")
