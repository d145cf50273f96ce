"""How the reconciler reaches nodes: a `Transport` runs shell commands as root; `SSHTransport` over SSH.

- One fabric `Connection` per node, opened on first use and reused; `run_many` runs at most `forks` at once.
- Every failure to reach a node (network, auth, host key, timeout) is a `CommandResult` with `error` set,
  never an exception; a node that failed to connect is not retried by the same transport (`forget` resets;
  `new_cycle` forgets every failure, for the daemon's long-lived transport).
- A dead cached connection is replaced before use (host key checked again; known_hosts re-read when edited); a
  connection lost during a command is reported, or retried once through `for_idempotent` (fact gathering).
  `close_idle` closes connections unused for a while.
- Host keys are checked against known_hosts (`ssh.known_hosts`, else ssh_config's UserKnownHostsFile, else
  ~/.ssh/known_hosts): unknown and changed keys are refused; `host_key_policy: accept-new` records unknown
  keys (never changed ones). fabric's own AutoAddPolicy is replaced on every connection and bastion hop.
- Commands run as `sh -c CMD`, through `sudo -n` when the SSH user is not root.
"""

from reconciler.transport.base import BaseTransport, CommandResult, Transport
from reconciler.transport.hostkeys import HostKeyRefused
from reconciler.transport.session import wrap_command
from reconciler.transport.ssh import SSHTransport
from reconciler.transport.ssherrors import ConnectError

__all__ = ["BaseTransport", "CommandResult", "ConnectError", "HostKeyRefused", "SSHTransport", "Transport",
           "wrap_command"]
