"""SSHTransport against real OpenSSH servers on 127.0.0.1: commands, stdin, parallelism, timeouts, bastions."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.desired.inventory import NodeSpec
from reconciler.model import ServiceManager, SSHDefaults
from reconciler.transport import CommandResult, SSHTransport, Transport
from reconciler.transport.session import PGID_WAIT
from tests.transport.sshd_server import SSHD, Sshd, free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")


def spec(name: str, port: int, key: Path | None, *, user: str = "root", proxy_jump: str | None = None,
         host: str = "127.0.0.1") -> NodeSpec:
    """A node as the inventory would resolve it."""
    return NodeSpec(name=name, host=host, port=port, user=user, identity_file=str(key) if key else None,
                    proxy_jump=proxy_jump, roles=frozenset(), service_manager=ServiceManager(), drain=None)


def make_transport(tmp_path: Path, servers: list[Sshd], **ssh: object) -> SSHTransport:
    """A transport whose known_hosts holds the keys of `servers`."""
    known = tmp_path / "known_hosts"
    known.write_text("".join(server.known_hosts_line for server in servers))
    settings = SSHDefaults.model_validate({"known_hosts": str(known), "connect_timeout": 3,
                                           "command_timeout": 20, **ssh})
    return SSHTransport(settings, tmp_path)


@pytest.fixture
def key(client_key: tuple[Path, str]) -> Path:
    return client_key[0]


@pytest.fixture
def one(tmp_path: Path, sshd: Sshd, key: Path) -> Iterator[tuple[SSHTransport, NodeSpec]]:
    """A transport and a node it can reach."""
    with make_transport(tmp_path, [sshd]) as transport:
        yield transport, spec("gpu01", sshd.port, key)


# ---------------------------------------------------------------- one command


def test_command_returns_stdout_stderr_and_exit_code(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    result = transport.run(node, "echo hello; echo oops >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "hello\n", "oops\n")
    assert result.error is None and not result.ok and not result.unreachable
    assert result.node == "gpu01" and result.duration > 0


def test_command_runs_as_root_under_sh(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    result = transport.run(node, 'echo "$0 $(id -u)"; for w in a "b c"; do printf "[%s]" "$w"; done')
    assert result.ok
    assert result.stdout == "sh 0\n[a][b c]"


def test_transport_satisfies_the_protocol(one: tuple[SSHTransport, NodeSpec]) -> None:
    assert isinstance(one[0], Transport)


def test_stdin_reaches_the_command(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    result = transport.run(node, "tr a-z A-Z", stdin="hello\nworld\n")
    assert result.ok and result.stdout == "HELLO\nWORLD\n"


def test_large_stdin_is_fast_and_exact(one: tuple[SSHTransport, NodeSpec]) -> None:
    """4 MiB through stdin in seconds (invoke's runner feeds one byte per 10 ms: that would take hours)."""
    transport, node = one
    data = "".join(f"line {i} é€ {'x' * (i % 70)}\n" for i in range(60000))
    data = (data * (4 * 2**20 // len(data) + 1))[: 4 * 2**20]
    start = time.monotonic()
    result = transport.run(node, "sha256sum | cut -d' ' -f1", stdin=data)
    assert result.ok, result.describe()
    assert result.stdout.strip() == hashlib.sha256(data.encode()).hexdigest()
    assert time.monotonic() - start < 15


def test_multibyte_output_survives_chunking(one: tuple[SSHTransport, NodeSpec]) -> None:
    """Output of 3-byte characters spans many reads; decoding whole keeps every character."""
    transport, node = one
    result = transport.run(node, "i=0; while [ $i -lt 4000 ]; do printf 'é€'; i=$((i+1)); done")
    assert result.ok
    assert result.stdout == "é€" * 4000 and "\ufffd" not in result.stdout


def test_invalid_utf8_is_replaced_not_raised(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    result = transport.run(node, r"printf 'a\377b'")
    assert result.ok and result.stdout == "a\ufffdb"


def test_command_that_ignores_stdin_still_finishes(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    result = transport.run(node, "exit 0", stdin="x" * 3_000_000, timeout=10)
    assert result.ok, result.describe()


# ---------------------------------------------------------------- connection reuse and counting


def test_one_connection_many_round_trips(tmp_path: Path, sshd_factory: Callable[..., Sshd], key: Path) -> None:
    first, second = sshd_factory(), sshd_factory()
    with make_transport(tmp_path, [first, second]) as transport:
        a, b = spec("a", first.port, key), spec("b", second.port, key)
        for _ in range(3):
            assert transport.run(a, "true").ok
        assert transport.run(b, "true").ok
        assert transport.run_many([a, b], "true")["b"].ok
        assert transport.round_trips == {"a": 4, "b": 2}
        assert transport.total_round_trips() == 6
        assert transport.connects == {"a": 1, "b": 1}
        transport.reset_counters()
        assert transport.round_trips == {}


def test_dropped_connection_is_reopened(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    assert transport.run(node, "true").ok
    transport.connection(node).client.get_transport().close()  # as if the node had rebooted
    result = transport.run(node, "echo again")
    assert result.ok and result.stdout == "again\n"
    assert transport.connects["gpu01"] == 2 and transport.round_trips["gpu01"] == 2


# ---------------------------------------------------------------- many nodes


def test_run_many_in_parallel_with_one_unreachable(tmp_path: Path, sshd_factory: Callable[..., Sshd],
                                                   key: Path) -> None:
    servers = [sshd_factory() for _ in range(3)]
    nodes = [spec(f"gpu0{i + 1}", server.port, key) for i, server in enumerate(servers)]
    nodes.append(spec("gpu04", free_port(), key))  # nothing listens there
    with make_transport(tmp_path, servers, forks=8) as transport:
        # A rendezvous, not timed overlaps (1.5 s of skew was possible under load): each command marks its arrival
        # and waits (15 s at most) until all three have; run one after the other, the first would see only itself.
        meet = tmp_path / "meet"
        meet.mkdir()
        results = transport.run_many(nodes, f"touch {meet}/$$; i=0; while [ $(ls {meet} | wc -l) -lt 3 ] && "
                                            f"[ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done; ls {meet} | wc -l")
    assert list(results) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert all(results[name].ok for name in ("gpu01", "gpu02", "gpu03"))
    down = results["gpu04"]
    assert down.unreachable and down.exit_code is None and not down.ok
    assert "cannot connect to 127.0.0.1" in (down.error or "") and "refused" in (down.error or "")
    assert [results[name].stdout.strip() for name in ("gpu01", "gpu02", "gpu03")] == ["3"] * 3, "not parallel"


def test_forks_bounds_parallelism(tmp_path: Path, sshd_factory: Callable[..., Sshd], key: Path) -> None:
    servers = [sshd_factory() for _ in range(3)]
    nodes = [spec(f"n{i}", server.port, key) for i, server in enumerate(servers)]
    with make_transport(tmp_path, servers, forks=1) as transport:
        assert transport.forks == 1
        results = transport.run_many(nodes, "date +%s.%N; sleep 0.3; date +%s.%N")
    spans = sorted([float(t) for t in result.stdout.split()] for result in results.values())
    assert len(spans) == 3
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:], strict=False)), spans


def test_forks_defaults_to_ssh_setting_and_argument_wins(tmp_path: Path) -> None:
    assert SSHTransport(SSHDefaults(forks=7), tmp_path).forks == 7
    assert SSHTransport(SSHDefaults(forks=7), tmp_path, forks=200).forks == 200


def test_run_many_per_node_command_stdin_and_skip(tmp_path: Path, sshd_factory: Callable[..., Sshd],
                                                   key: Path) -> None:
    servers = [sshd_factory() for _ in range(3)]
    nodes = [spec(f"n{i}", server.port, key) for i, server in enumerate(servers)]

    def command(node: NodeSpec) -> str | None:
        if node.name == "n2":
            return None
        if node.name == "n1":
            raise RuntimeError("driver bug")
        return "cat; echo"

    with make_transport(tmp_path, servers) as transport:
        results = transport.run_many(nodes, command, stdin=lambda node: f"for {node.name}")
    assert set(results) == {"n0", "n1"}
    assert results["n0"].stdout == "for n0\n"
    assert results["n1"].error == "internal error: RuntimeError: driver bug"


def test_unreachable_node_is_tried_once_per_transport(tmp_path: Path, key: Path) -> None:
    node = spec("gone", free_port(), key)
    with make_transport(tmp_path, []) as transport:
        first = transport.run(node, "true")
        second = transport.run(node, "true")
        assert first.unreachable and second.error == first.error
        assert transport.connects == {"gone": 1} and transport.round_trips == {}
        transport.forget("gone")
        assert transport.run(node, "true").unreachable and transport.connects == {"gone": 2}


def test_authentication_failure_is_an_error(tmp_path: Path, sshd: Sshd) -> None:
    other_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    with make_transport(tmp_path, [sshd]) as transport:
        result = transport.run(spec("gpu01", sshd.port, other_key, user="nosuchuser"), "true")
    assert result.unreachable
    assert (result.error or "").startswith(f"authentication failed for nosuchuser@127.0.0.1:{sshd.port}")


# ---------------------------------------------------------------- timeouts


def test_command_timeout_is_an_error_not_a_hang(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    start = time.monotonic()
    # 3 s: on a loaded machine the remote shell may take over a second to print (seen at a load average of 250)
    result = transport.run(node, "echo started; sleep 30", timeout=3)
    assert time.monotonic() - start < 3 + PGID_WAIT + 2  # the deadline, the wait for the process group, the kill
    assert result.error == "command timed out after 3s" and result.exit_code is None and result.unreachable
    assert result.stdout == "started\n"
    assert transport.run(node, "echo still usable").stdout == "still usable\n"
    assert transport.connects["gpu01"] == 1


def test_command_killed_by_a_signal_has_no_exit_code(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    result = transport.run(node, "echo before; kill -9 $$")
    assert result.exit_code is None and result.stdout == "before\n" and not result.ok
    assert result.error == "no exit status: the command was killed by a signal or its session ended"


def test_command_timeout_defaults_to_ssh_setting(tmp_path: Path, sshd: Sshd, key: Path) -> None:
    with make_transport(tmp_path, [sshd], command_timeout=1) as transport:
        result = transport.run(spec("gpu01", sshd.port, key), "sleep 30")
    assert result.error == "command timed out after 1s"


def test_connect_timeout_when_server_never_answers(tmp_path: Path, key: Path) -> None:
    """A port that accepts TCP but never sends an SSH banner."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        node = spec("mute", silent.getsockname()[1], key)
        with make_transport(tmp_path, [], connect_timeout=1) as transport:
            start = time.monotonic()
            result = transport.run(node, "true")
            elapsed = time.monotonic() - start
    assert result.unreachable
    assert (result.error or "").startswith(f"connect to 127.0.0.1:{node.port}: no SSH banner within 1s")
    assert (result.error or "").endswith("(twice)"), result.error  # nothing sent: tried once more, then reported
    assert elapsed < 6, f"connect took {elapsed:.1f}s with connect_timeout=1 (two tries and a 1 s pause)"


# ---------------------------------------------------------------- bastion


def bastion_setup(tmp_path: Path, sshd_factory: Callable[..., Sshd], bastion_extra: str = ""
                  ) -> tuple[Sshd, Sshd]:
    """A target sshd and a bastion sshd (both on 127.0.0.1)."""
    return sshd_factory(), sshd_factory(bastion_extra)


def test_proxy_jump_through_bastion(tmp_path: Path, sshd_factory: Callable[..., Sshd], key: Path) -> None:
    target, bastion = bastion_setup(tmp_path, sshd_factory)
    nodes = [spec("gpu01", target.port, key, proxy_jump=f"root@127.0.0.1:{bastion.port}"),
             spec("gpu02", target.port, key, proxy_jump=f"root@127.0.0.1:{bastion.port}")]
    with make_transport(tmp_path, [target, bastion]) as transport:
        results = transport.run_many(nodes, "echo via $SSH_CONNECTION")
    assert all(result.ok for result in results.values()), [r.describe() for r in results.values()]
    assert f"127.0.0.1 {target.port}" in results["gpu01"].stdout
    # both nodes went through ONE login to the bastion (shared), and the target saw two logins
    assert bastion.log.read_text().count("Accepted publickey for root") == 1
    assert target.log.read_text().count("Accepted publickey for root") == 2


def test_proxy_jump_really_goes_through_the_bastion(tmp_path: Path, sshd_factory: Callable[..., Sshd],
                                                    key: Path) -> None:
    """With forwarding disabled on the bastion, the target (reachable directly) cannot be reached."""
    target, bastion = bastion_setup(tmp_path, sshd_factory, "AllowTcpForwarding no")
    node = spec("gpu01", target.port, key, proxy_jump=f"127.0.0.1:{bastion.port}")
    with make_transport(tmp_path, [target, bastion]) as transport:
        result = transport.run(node, "true")
        direct = transport.run(spec("direct", target.port, key), "true")
    assert direct.ok
    assert result.unreachable and "bastion" in (result.error or ""), result.error


def test_bastion_down_is_reported_for_every_node_behind_it(tmp_path: Path, sshd: Sshd, key: Path) -> None:
    jump = f"127.0.0.1:{free_port()}"
    nodes = [spec(f"gpu0{i}", sshd.port, key, proxy_jump=jump) for i in range(1, 4)]
    with make_transport(tmp_path, [sshd]) as transport:
        results = transport.run_many(nodes, "true")
    assert all(r.unreachable and (r.error or "").startswith("via bastion: cannot connect to 127.0.0.1")
               for r in results.values()), [r.error for r in results.values()]


def test_bastion_host_key_is_checked_too(tmp_path: Path, sshd_factory: Callable[..., Sshd], key: Path) -> None:
    target, bastion = bastion_setup(tmp_path, sshd_factory)
    node = spec("gpu01", target.port, key, proxy_jump=f"127.0.0.1:{bastion.port}")
    with make_transport(tmp_path, [target]) as transport:  # the bastion's key is not known
        result = transport.run(node, "true")
    assert result.unreachable
    assert (result.error or "").startswith(f"host key for bastion 127.0.0.1:{bastion.port} not in")


# ---------------------------------------------------------------- misc


def test_result_properties() -> None:
    ok = CommandResult("n", 0, "out", "", 0.1)
    failed = CommandResult("n", 2, "", "boom\n", 0.1)
    down = CommandResult("n", None, "", "", 0.1, error="cannot connect")
    assert ok.ok and not ok.unreachable
    assert not failed.ok and not failed.unreachable and failed.describe() == "n: exit 2: boom"
    assert not down.ok and down.unreachable and down.describe() == "n: cannot connect"


def test_concurrent_runs_on_one_node_share_one_connection(one: tuple[SSHTransport, NodeSpec]) -> None:
    transport, node = one
    results: list[CommandResult] = []
    threads = [threading.Thread(target=lambda: results.append(transport.run(node, "sleep 0.3; echo x")))
               for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.stdout for r in results] == ["x\n"] * 5
    assert transport.connects == {"gpu01": 1} and transport.round_trips == {"gpu01": 5}
