"""Host key checking against real sshd: unknown and changed keys refused, accept-new, aliases, ssh_config."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.desired.inventory import NodeSpec
from reconciler.model import ServiceManager, SSHDefaults
from reconciler.transport import SSHTransport
from reconciler.transport.hostkeys import known_hosts_name
from tests.transport.sshd_server import SSHD, Sshd, keygen

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path(SSHD).exists(),
                                reason="needs root (sshd's privilege separation) and OpenSSH's sshd")


def spec(port: int, key: Path | None, *, host: str = "127.0.0.1", name: str = "gpu01") -> NodeSpec:
    return NodeSpec(name=name, host=host, port=port, user="root", identity_file=str(key) if key else None,
                    proxy_jump=None, roles=frozenset(), service_manager=ServiceManager(), drain=None)


def transport(base: Path, **ssh: object) -> SSHTransport:
    return SSHTransport(SSHDefaults.model_validate({"connect_timeout": 3, **ssh}), base)


def openssh_fingerprint(public_key: str, tmp_path: Path) -> str:
    """The SHA256 fingerprint as ssh-keygen prints it."""
    path = tmp_path / "fp.pub"
    path.write_text(public_key + "\n")
    return subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)], check=True,
                          capture_output=True, text=True).stdout.split()[1]


@pytest.fixture
def key(client_key: tuple[Path, str]) -> Path:
    return client_key[0]


# ---------------------------------------------------------------- changed keys


@pytest.mark.parametrize("policy", ["reject", "accept-new"])
def test_changed_host_key_is_refused_and_nothing_runs(tmp_path: Path, sshd: Sshd, key: Path,
                                                      policy: str) -> None:
    impostor = keygen(tmp_path / "impostor")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {impostor}\n")
    marker = tmp_path / "ran"
    with transport(tmp_path, known_hosts=str(known), host_key_policy=policy) as ssh:
        result = ssh.run(spec(sshd.port, key), f"touch {marker}")
    error = result.error or ""
    assert result.unreachable and result.exit_code is None
    assert error.startswith(f"HOST KEY CHANGED for gpu01 (127.0.0.1:{sshd.port}): {known} has ssh-ed25519 ")
    assert openssh_fingerprint(impostor, tmp_path) in error
    assert f"the server offered ssh-ed25519 {openssh_fingerprint(sshd.host_key, tmp_path)}" in error
    assert "refusing" in error
    assert not marker.exists(), "a command ran on a host whose key changed"
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {impostor}\n", "known_hosts was modified"


def test_known_key_of_another_type_only_is_refused(tmp_path: Path, sshd: Sshd, key: Path) -> None:
    """known_hosts has an ECDSA key for the host, the server has only ed25519: cannot verify, refuse."""
    other = keygen(tmp_path / "ecdsa", "ecdsa")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other}\n")
    with transport(tmp_path, known_hosts=str(known), host_key_policy="accept-new") as ssh:
        result = ssh.run(spec(sshd.port, key), "true")
    assert (result.error or "").startswith("HOST KEY CHANGED for gpu01")


@pytest.mark.parametrize(("policy", "listed"), [("reject", True), ("accept-new", False)])
def test_revoked_key_is_refused(tmp_path: Path, sshd: Sshd, key: Path, policy: str, listed: bool) -> None:
    """A `@revoked` line wins over a matching entry, and accept-new never records a revoked key."""
    known = tmp_path / "known_hosts"
    text = (sshd.known_hosts_line if listed else "") + f"@revoked * {sshd.host_key}\n"
    known.write_text(text)
    marker = tmp_path / "ran"
    with transport(tmp_path, known_hosts=str(known), host_key_policy=policy) as ssh:
        result = ssh.run(spec(sshd.port, key), f"touch {marker}")
    assert (result.error or "").startswith(f"host key for gpu01 (127.0.0.1:{sshd.port}) (ssh-ed25519 SHA256:")
    assert f"is marked @revoked in {known}: refusing" in (result.error or "")
    assert not marker.exists() and known.read_text() == text


# ---------------------------------------------------------------- unknown keys


@pytest.mark.parametrize("exists", [True, False])
def test_unknown_host_is_refused_under_reject(tmp_path: Path, sshd: Sshd, key: Path, exists: bool) -> None:
    known = tmp_path / "known_hosts"
    if exists:
        known.write_text("")
    marker = tmp_path / "ran"
    with transport(tmp_path, known_hosts=str(known)) as ssh:
        result = ssh.run(spec(sshd.port, key), f"touch {marker}")
    assert result.error == (f"host key for gpu01 (127.0.0.1:{sshd.port}) not in {known} "
                            f"(as [127.0.0.1]:{sshd.port}): refusing "
                            "(set ssh.host_key_policy: accept-new to trust on first use)")
    assert not marker.exists()
    assert known.exists() == exists and (not exists or known.read_text() == "")


def test_accept_new_records_the_key_and_later_runs_check_it(tmp_path: Path, sshd_factory: Callable[..., Sshd],
                                                            key: Path) -> None:
    servers = [sshd_factory() for _ in range(3)]
    known = tmp_path / "state" / "known_hosts"  # its directory does not exist yet either
    nodes = [spec(s.port, key, name=f"gpu0{i}") for i, s in enumerate(servers)]
    with transport(tmp_path, known_hosts=str(known), host_key_policy="accept-new") as ssh:
        results = ssh.run_many(nodes, "echo ok")
    assert all(r.ok for r in results.values()), [r.describe() for r in results.values()]
    assert sorted(known.read_text().splitlines(keepends=True)) == sorted(s.known_hosts_line for s in servers)
    assert oct(known.stat().st_mode & 0o777) == "0o600"
    for server in servers:  # OpenSSH reads what we wrote
        found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{server.port}", "-f", str(known)],
                               capture_output=True, text=True)
        assert found.returncode == 0 and server.host_key in found.stdout
    with transport(tmp_path, known_hosts=str(known), host_key_policy="reject") as ssh:
        assert ssh.run(nodes[0], "true").ok


def test_hashed_known_hosts_entries_are_understood(tmp_path: Path, sshd: Sshd, key: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line)
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert known.read_text().startswith("|1|")
    with transport(tmp_path, known_hosts=str(known)) as ssh:
        assert ssh.run(spec(sshd.port, key), "true").ok


def test_odd_known_hosts_lines_are_skipped(tmp_path: Path, sshd: Sshd, key: Path) -> None:
    """Comments, @cert-authority, garbage and bad base64 do not stop the good entry from working."""
    known = tmp_path / "known_hosts"
    known.write_text("# comment\n\n@cert-authority *.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5\n"
                     "just garbage\nhost ssh-ed25519 not*base64\nhost2 ssh-ed25519 QUJD\n" + sshd.known_hosts_line)
    with transport(tmp_path, known_hosts=str(known)) as ssh:
        result = ssh.run(spec(sshd.port, key), "true")
    assert result.ok, result.error


def test_known_key_type_is_preferred_when_the_server_has_several(tmp_path: Path,
                                                                 sshd_factory: Callable[..., Sshd],
                                                                 key: Path) -> None:
    """Server has RSA and ed25519 keys, known_hosts only the RSA one: negotiate RSA, accept."""
    rsa = keygen(tmp_path / "host_rsa", "rsa")
    server = sshd_factory(f"HostKey {tmp_path}/host_rsa")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{server.port} {rsa}\n")
    with transport(tmp_path, known_hosts=str(known)) as ssh:
        result = ssh.run(spec(server.port, key), "true")
    assert result.ok, result.error


def test_lookup_names() -> None:
    assert known_hosts_name("gpu01", 22) == "gpu01"
    assert known_hosts_name("10.250.0.11", 2222) == "[10.250.0.11]:2222"
    assert known_hosts_name("10.250.0.11", 2222, "gpu01") == "gpu01"


# ---------------------------------------------------------------- ssh_config


def write_ssh_config(base: Path, text: str) -> str:
    """Write an ssh_config in the desired-state dir; return its path relative to it."""
    (base / "ssh_config").write_text(text)
    return "ssh_config"


def test_ssh_config_hostname_port_user_identity_proxycommand(tmp_path: Path, sshd: Sshd, key: Path) -> None:
    """The node is only an alias; ssh_config says where it is, who to be, which key, and how to get there."""
    marker = tmp_path / "proxy-used"
    (tmp_path / "kh").write_text(sshd.known_hosts_line)
    config = write_ssh_config(tmp_path, f"""\
Host gpu*
    HostName 127.0.0.1
    Port {sshd.port}
    User root
    IdentityFile {key}
    UserKnownHostsFile {tmp_path}/kh
    ProxyCommand sh -c "touch {marker}; exec nc %h %p"
""")
    with transport(tmp_path, config=config) as ssh:
        result = ssh.run(spec(22, None, host="gpu07", name="gpu07"), "echo $SSH_CONNECTION")
    assert result.ok, result.error
    assert result.stdout.split()[2:] == ["127.0.0.1", str(sshd.port)]
    assert marker.exists(), "the ProxyCommand from ssh_config was not used"


def test_ssh_config_user_loses_to_an_explicit_inventory_user(tmp_path: Path, sshd: Sshd, key: Path) -> None:
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_line)
    config = write_ssh_config(tmp_path, f"Host *\n    User nosuchuser\n    Port {sshd.port}\n")
    node = spec(22, key)
    with transport(tmp_path, config=config, known_hosts="known_hosts") as ssh:
        result = ssh.run(node, "true")
    assert (result.error or "").startswith(f"authentication failed for nosuchuser@127.0.0.1:{sshd.port}")
    with transport(tmp_path, config=config, known_hosts="known_hosts", user="root") as ssh:
        assert ssh.run(node, "true").ok


def test_host_key_alias_is_the_lookup_name(tmp_path: Path, sshd: Sshd, key: Path) -> None:
    config = write_ssh_config(tmp_path, f"""\
Host gpu01
    HostName 127.0.0.1
    Port {sshd.port}
    HostKeyAlias gpu01-key
""")
    known = tmp_path / "known_hosts"
    node = spec(22, key, host="gpu01")
    known.write_text(sshd.known_hosts_line)  # filed under [127.0.0.1]:port, not under the alias
    with transport(tmp_path, config=config, known_hosts=str(known)) as ssh:
        refused = ssh.run(node, "true")
    assert "not in" in (refused.error or "") and "(as gpu01-key)" in (refused.error or "")
    known.write_text(f"gpu01-key {sshd.host_key}\n")
    with transport(tmp_path, config=config, known_hosts=str(known)) as ssh:
        assert ssh.run(node, "true").ok


def test_missing_ssh_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="ssh.config"):
        transport(tmp_path, config="nope/ssh_config")
