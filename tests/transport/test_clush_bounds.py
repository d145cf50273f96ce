"""Output bounds on the ClusterShell transport (issue 32 item 8), against a real OpenSSH server on 127.0.0.1:
the gateway `gw` and the nodes `n1`, `n2` are names for it in an ssh_config, so the root really connects to the
gateway, which runs ClusterShell's Gateway (the system python3's) and fans out to the nodes with OpenSSH.
The bound itself (BoundedOutput) is checked without a server first."""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("ClusterShell")

from reconciler.desired.inventory import NodeSpec  # noqa: E402
from reconciler.model import ServiceManager, SSHDefaults  # noqa: E402
from reconciler.transport.bounds import MAX_OUTPUT, MAX_STDERR, BoundedOutput, too_large_error  # noqa: E402
from reconciler.transport.clush import ClushTransport  # noqa: E402
from tests.transport.sshd_server import SSHD, Sshd  # noqa: E402

needs_sshd = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")
# an endless stream of 1 KiB lines (ClusterShell is line-oriented: see the module docstring of clush.py)
ENDLESS = 'yes "$(head -c 1023 /dev/zero | tr "\\0" x)"'


def test_bounded_output_keeps_stdout_to_the_bound_and_the_end_of_stderr() -> None:
    output = BoundedOutput(limit=10, stderr_kept=4)
    assert output.add_stdout(b"0123456789") and bytes(output.stdout) == b"0123456789"
    assert not output.add_stdout(b"x")  # one byte past the bound: refused, and what was kept is let go
    assert output.too_large and output.stdout == bytearray() and output.peak == 11
    assert not output.add_stdout(b"more") and output.stdout == bytearray() and output.peak == 11
    output.add_stderr(b"abc")
    output.add_stderr(b"defg\n")
    assert bytes(output.stderr) == b"efg\n"
    assert (BoundedOutput().limit, BoundedOutput().stderr_kept) == (MAX_OUTPUT, MAX_STDERR)
    assert too_large_error() == "answer larger than 64 MiB: refused (the node's output is not read)"


@pytest.fixture
def through_gateway(tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str]) -> Iterator[
        tuple[ClushTransport, list[NodeSpec]]]:
    """A ClushTransport reaching nodes n1, n2 through gateway gw: all three are the test's sshd."""
    if not Path("/usr/lib/python3/dist-packages/ClusterShell").is_dir():
        pytest.skip("the system python3 has no ClusterShell: apt-get install python3-clustershell (testbed deps)")
    (tmp_path / "ssh_config").write_text("Host gw n1 n2\n  HostName 127.0.0.1\n")
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_line)
    ssh = SSHDefaults.model_validate({
        "config": "ssh_config", "known_hosts": "known_hosts", "port": sshd.port, "connect_timeout": 10,
        "command_timeout": 30, "gateways": [{"name": "gw", "nodes": "n[1-2]"}]})
    nodes = [NodeSpec(name=name, host=name, port=sshd.port, user="root", identity_file=str(client_key[0]),
                      proxy_jump=None, roles=frozenset(), service_manager=ServiceManager(), drain=None)
             for name in ("n1", "n2")]
    with ClushTransport(ssh, tmp_path) as transport:
        yield transport, nodes


def per_node(commands: dict[str, str]) -> Callable[[NodeSpec], str]:
    return lambda spec: commands[spec.name]


@needs_sshd
def test_output_through_a_gateway_comes_back_whole(through_gateway: tuple[ClushTransport, list[NodeSpec]]) -> None:
    transport, nodes = through_gateway
    results = transport.run_many(nodes, per_node({"n1": "printf 'a\\n\\nb\\n'; echo oops >&2; exit 3",
                                                  "n2": "printf 'no newline'"}))
    n1, n2 = results["n1"], results["n2"]
    assert (n1.exit_code, n1.stdout, n1.stderr, n1.error) == (3, "a\n\nb\n", "oops\n", None)
    assert (n2.exit_code, n2.stdout, n2.error) == (0, "no newline\n", None)  # line-oriented: the newline added


@needs_sshd
def test_endless_output_through_a_gateway_is_refused_at_the_bound(
        through_gateway: tuple[ClushTransport, list[NodeSpec]]) -> None:
    """A node that writes without end is cut off at MAX_OUTPUT and gets the direct transport's error, soon (not
    at its timeout); this process holds no more than the bound and some slack; the other node is unaffected."""
    transport, nodes = through_gateway
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    results = transport.run_many(nodes, per_node({"n1": ENDLESS, "n2": "echo fine"}), timeout=180)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    hostile, other = results["n1"], results["n2"]
    assert hostile.error == too_large_error(), hostile.describe()
    assert hostile.exit_code is None and hostile.stdout == ""
    assert other.ok and other.stdout == "fine\n", other.describe()
    # what was held: the collected stdout (at most the bound plus a line) and ClusterShell's messages in flight
    assert grown < MAX_OUTPUT + 128 * 2**20, f"the process grew by {grown / 2**20:.0f} MiB"
