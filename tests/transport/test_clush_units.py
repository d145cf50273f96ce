"""ClushTransport parts that need no testbed: stdin in the command line, OpenSSH options, the gateways model."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("ClusterShell")

from reconciler.desired.inventory import NodeSpec  # noqa: E402
from reconciler.model import ServiceManager, SSHDefaults  # noqa: E402
from reconciler.transport.clush import MAX_STDIN, RC_MARKER, ClushTransport, with_stdin  # noqa: E402


def spec(name: str, port: int = 22, identity: str | None = None) -> NodeSpec:
    """A node spec with the defaults."""
    return NodeSpec(name=name, host=name, port=port, user="root", identity_file=identity, proxy_jump=None,
                    roles=frozenset(), service_manager=ServiceManager(), drain=None)


def test_stdin_rides_in_the_command_line_byte_for_byte() -> None:
    data = "line 1\n'quotes' \"and\" $dollars\n\u00e9\n"
    command = f"{with_stdin('sh -c cat', data)}; echo {RC_MARKER}$? >&2"
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert proc.stdout == data and proc.stderr == f"{RC_MARKER}0\n"
    assert subprocess.run(["sh", "-c", with_stdin("cat", None)], capture_output=True, text=True).stdout == ""
    with pytest.raises(ValueError, match="ClusterShell gateway"):
        with_stdin("cat", "x" * (MAX_STDIN + 1))


def test_ssh_options_keep_the_host_key_rules(tmp_path: Path) -> None:
    ssh = SSHDefaults(config="ssh_config", known_hosts="known_hosts", gateways=[{"name": "gw1", "nodes": "n[1-2]"}])
    (tmp_path / "ssh_config").write_text("")
    transport = ClushTransport(ssh, tmp_path)
    opts = transport.ssh_options(spec("n1", port=2222, identity="id"))
    assert opts == ["-F", str(tmp_path / "ssh_config"), "-i", str(tmp_path / "id"), "-o", "IdentitiesOnly=yes",
                    "-p", "2222", "-o", "StrictHostKeyChecking=yes", "-o",
                    f"UserKnownHostsFile={tmp_path / 'known_hosts'}", "-o", "GlobalKnownHostsFile=/dev/null"]
    assert transport.behind == {"n1": "gw1", "n2": "gw1"}
    accept = ClushTransport(SSHDefaults(host_key_policy="accept-new"), tmp_path).ssh_options(spec("n1"))
    assert accept == ["-o", "StrictHostKeyChecking=accept-new"]


@pytest.mark.parametrize(("gateways", "message"), [
    ([{"name": "a", "nodes": "n[1-3]"}, {"name": "b", "nodes": "n3"}], "node n3 is behind two gateways (a, b)"),
    ([{"name": "n1", "nodes": "n[1-2]"}], "gateway n1 cannot be behind itself"),
    ([{"name": "a", "nodes": "n[1-"}], "nodes"),
])
def test_bad_gateways_are_refused(gateways: list[dict[str, str]], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        SSHDefaults(gateways=gateways)
