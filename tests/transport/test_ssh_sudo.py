"""Commands run as root: directly for root, through `sudo -n sh -c` for any other SSH user."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.desired.inventory import NodeSpec
from reconciler.facts.gather import GATHER_COMMAND, FactRequest
from reconciler.model import ServiceManager, SSHDefaults
from reconciler.transport import SSHTransport, wrap_command
from tests.transport.sshd_server import SSHD, Sshd

TRICKY = """printf '%s|' "$0" 'single '"'"'quote' "dollar \\$HOME" `echo back`; echo "$((1+2))" """


def test_root_gets_plain_sh() -> None:
    assert wrap_command("echo hi", "root") == "sh -c 'echo hi'"


def test_other_users_get_non_interactive_sudo() -> None:
    assert wrap_command("echo hi", "reconciler") == "sudo -n -- sh -c 'echo hi'"


def test_quoting_survives_the_wrapping() -> None:
    """The wrapped line, run by a shell (as sshd does), prints exactly what the bare command prints."""
    bare = subprocess.run(["sh", "-c", TRICKY], capture_output=True, text=True, check=True).stdout
    wrapped = subprocess.run(["sh", "-c", wrap_command(TRICKY, "root")], capture_output=True, text=True,
                             check=True).stdout
    assert wrapped == bare == "sh|single 'quote|dollar $HOME|back|3\n"


# ---------------------------------------------------------------- a real non-root user with sudo

needs_sudo = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("sudo") or not Path(SSHD).exists()
                                or not shutil.which("useradd"),
                                reason="needs root, sudo, useradd and OpenSSH's sshd")


def make_user(name: str, sudoers: str | None) -> None:
    """A login user (key only: password field '*', not locked) and optionally its sudoers rule."""
    subprocess.run(["userdel", "-f", name], capture_output=True)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", "-p", "*", name], check=True)
    if sudoers is not None:
        rule = Path(f"/etc/sudoers.d/{name}")
        rule.write_text(f"{name} {sudoers}\n")
        rule.chmod(0o440)


def remove_user(name: str) -> None:
    Path(f"/etc/sudoers.d/{name}").unlink(missing_ok=True)
    subprocess.run(["userdel", "-f", name], capture_output=True)  # -f: its sshd session may linger


@pytest.fixture
def sudo_users() -> Iterator[tuple[str, str]]:
    """(user with NOPASSWD sudo, user with password-only sudo)."""
    users = ("rtbsudo", "rtbpass")
    make_user(users[0], "ALL=(ALL) NOPASSWD: ALL")
    make_user(users[1], "ALL=(ALL) ALL")
    yield users
    for user in users:
        remove_user(user)


def node(port: int, key: Path, user: str) -> NodeSpec:
    return NodeSpec(name="gpu01", host="127.0.0.1", port=port, user=user, identity_file=str(key),
                    proxy_jump=None, roles=frozenset(), service_manager=ServiceManager(), drain=None)


@needs_sudo
def test_non_root_user_runs_as_root_through_sudo(tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str],
                                                 sudo_users: tuple[str, str]) -> None:
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_line)
    ssh = SSHDefaults(known_hosts="known_hosts", connect_timeout=3, command_timeout=20)
    with SSHTransport(ssh, tmp_path) as transport:
        result = transport.run(node(sshd.port, client_key[0], sudo_users[0]), 'echo "$(id -u) $SUDO_USER"; cat',
                               stdin="through sudo\n")
    assert result.ok, result.describe()
    assert result.stdout == f"0 {sudo_users[0]}\nthrough sudo\n"


@needs_sudo
def test_sudo_wanting_a_password_fails_fast_instead_of_hanging(tmp_path: Path, sshd: Sshd,
                                                               client_key: tuple[Path, str],
                                                               sudo_users: tuple[str, str]) -> None:
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_line)
    ssh = SSHDefaults(known_hosts="known_hosts", connect_timeout=3, command_timeout=30)
    with SSHTransport(ssh, tmp_path) as transport:
        result = transport.run(node(sshd.port, client_key[0], sudo_users[1]), "id -u")
    assert result.error is None and result.exit_code == 1
    assert "password is required" in result.stderr
    assert result.duration < 10


# ---------------------------------------------------------------- the shipped sudoers rule (deploy/sudoers.reconciler)

SUDOERS = Path(__file__).resolve().parents[2] / "deploy" / "sudoers.reconciler"


@pytest.mark.skipif(not shutil.which("visudo"), reason="needs sudo's visudo")
def test_shipped_sudoers_file_parses() -> None:
    check = subprocess.run(["visudo", "-cf", str(SUDOERS)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and "parsed OK" in check.stdout, check.stdout + check.stderr


@pytest.fixture
def shipped_rule_user() -> Iterator[str]:
    """A user holding exactly the shipped rule (the file's `reconciler` renamed, so no real account is touched)."""
    name = "rtbrecon"
    make_user(name, None)
    rule = Path(f"/etc/sudoers.d/{name}")
    rule.write_text(re.sub(r"\breconciler\b(?= ALL=|, )|(?<=Defaults:)reconciler\b", name, SUDOERS.read_text()))
    rule.chmod(0o440)
    yield name
    remove_user(name)


@needs_sudo
def test_shipped_sudoers_rule_runs_the_reconcilers_commands_and_nothing_else(
        tmp_path: Path, sshd: Sshd, client_key: tuple[Path, str], shipped_rule_user: str) -> None:
    """Over SSH as that user, fact gathering runs as root; the same user's bare `sudo -n id` is refused."""
    assert f"{shipped_rule_user} ALL=(root) NOPASSWD" in Path(f"/etc/sudoers.d/{shipped_rule_user}").read_text()
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_line)
    ssh = SSHDefaults(known_hosts="known_hosts", connect_timeout=3, command_timeout=30)
    request = FactRequest(files=["/etc/shadow"], commands={"uid": "id -u"})
    with SSHTransport(ssh, tmp_path) as transport:
        result = transport.run(node(sshd.port, client_key[0], shipped_rule_user), GATHER_COMMAND,
                               stdin=request.encode())
    assert result.ok, result.describe()
    facts = json.loads(result.stdout)
    assert facts["commands"]["uid"]["stdout"] == "0\n"
    assert facts["files"]["/etc/shadow"]["exists"]  # readable only by root
    bare = subprocess.run(["runuser", "-u", shipped_rule_user, "--", "sudo", "-n", "id", "-u"], capture_output=True,
                          text=True, timeout=30)
    assert bare.returncode != 0 and bare.stdout == "", bare.stdout
