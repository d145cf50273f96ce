"""SSHTransport on the namespace testbed: the testbed's ssh_config (ProxyCommand `nsenter --net=... nc`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.desired.inventory import NodeSpec
from reconciler.model import ServiceManager, SSHDefaults
from reconciler.transport import SSHTransport
from tests.transport.sshd_server import keygen

TESTBED = Path(__file__).resolve().parents[2] / "deploy" / "testbed" / "testbed"
NAME, SUBNET = "tbackend", "10.252.0"
NODES = ["ctl", "gpu01", "gpu02"]

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.skipif(os.geteuid() != 0 or not TESTBED.exists() or not shutil.which("ip"),
                       reason="needs root and deploy/testbed"),
]


@pytest.fixture(scope="module")
def desired_dir() -> Iterator[Path]:
    """A bare 2-compute testbed of our own; its desired-state directory. Always torn down."""
    try:
        up = subprocess.run([str(TESTBED), "up", "--nodes", "2", "--bare", "--name", NAME, "--subnet", SUBNET],
                            capture_output=True, text=True, timeout=400)
        assert up.returncode == 0, f"testbed up failed:\n{up.stderr}"
        yield Path(up.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run([str(TESTBED), "down", "--name", NAME], capture_output=True, timeout=300)


def node(name: str) -> NodeSpec:
    """A node known only by its ssh_config alias: address, user, key and proxy all come from ssh_config."""
    return NodeSpec(name=name, host=name, port=22, user="root", identity_file=None, proxy_jump=None,
                    roles=frozenset(), service_manager=ServiceManager(), drain=None)


def test_every_node_through_the_netns_proxy_command(desired_dir: Path) -> None:
    ssh = SSHDefaults(config="../ssh_config")  # relative to the desired-state directory
    with SSHTransport(ssh, desired_dir) as transport:
        results = transport.run_many([node(n) for n in NODES], "hostname; echo $SSH_CONNECTION")
        again = transport.run(node("gpu01"), "cat", stdin="second command\n")
        assert transport.connects == dict.fromkeys(NODES, 1)
    assert {n: r.stdout.splitlines()[0] for n, r in results.items() if r.ok} == {n: n for n in NODES}
    assert results["gpu01"].stdout.split()[3:] == [f"{SUBNET}.11", "22"]
    assert again.stdout == "second command\n"


def test_wrong_host_key_on_the_testbed_is_refused(desired_dir: Path, tmp_path: Path) -> None:
    state = desired_dir.parent
    impostor = keygen(tmp_path / "impostor")
    tampered = tmp_path / "known_hosts"
    lines = (state / "known_hosts").read_text().splitlines()
    address = f"{SUBNET}.11"
    ours = [line for line in lines if address in line.split()[0].split(",")]
    assert len(ours) == 1, lines
    tampered.write_text("".join(f"{address} {impostor}\n" if line in ours else line + "\n" for line in lines))
    marker = "/root/tbackend-marker"
    ssh = SSHDefaults(config=str(state / "ssh_config"), known_hosts=str(tampered))
    with SSHTransport(ssh, desired_dir) as transport:
        results = transport.run_many([node("gpu01"), node("gpu02")], f"touch {marker}")
    assert results["gpu02"].ok
    assert (results["gpu01"].error or "").startswith(f"HOST KEY CHANGED for gpu01 ({address}): {tampered}")
    with SSHTransport(SSHDefaults(config=str(state / "ssh_config")), desired_dir) as transport:
        check = transport.run_many([node("gpu01"), node("gpu02")], f"test -e {marker}; echo $?; rm -f {marker}")
    assert (check["gpu01"].stdout, check["gpu02"].stdout) == ("1\n", "0\n")
