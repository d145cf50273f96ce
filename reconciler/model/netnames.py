"""Rules for the names that reach SSH, Slurm and paths: node names, hosts, users, ports, bastions (issue 22).

A value that reaches OpenSSH or paramiko (a host, a user, a bastion, a gateway) is substituted into
ssh_config's `ProxyCommand %h` and into ClusterShell's `ssh ... HOST` command line: one that starts with `-`
would be an option (`-oProxyCommand=...` runs a local command), one with shell metacharacters a command. Hosts
are hostnames or IP addresses, users POSIX user names, ports in range. Node names follow Slurm's NodeName
rules (they end up in paths, hostlists, drain reasons and metric labels): a hostname label set, no `/`, no `..`.
"""

from __future__ import annotations

import ipaddress
import re

MAX_NODE_NAME = 64  # HOST_NAME_MAX; Slurm keeps node names in fixed buffers of about this size
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"
_NODE_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_JUMP = re.compile(r"(?:(?P<user>[^@]+)@)?(?P<host>\[[^\]]+\]|[^:\[\]]+)(?::(?P<port>[^:]+))?")


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:80] + "...")


def node_name(name: str) -> str:
    """A Slurm node name: letters, digits, `_` and `-`, dot-separated labels, at most 64 characters."""
    if len(name) > MAX_NODE_NAME or not _NODE_NAME.fullmatch(name):
        raise ValueError(f"not a node name: {_shown(name)} (Slurm NodeName rules: letters, digits, '_' and '-', "
                         f"labels separated by single dots, no '/', at most {MAX_NODE_NAME} characters)")
    return name


def host(value: str) -> str:
    """A host to connect to: a hostname (or ssh_config alias) or an IPv4/IPv6 address; never an option."""
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ipaddress.ip_address(bare)
        return value
    except ValueError:
        pass
    if len(value) > 253 or not _HOSTNAME.fullmatch(value):
        raise ValueError(f"not a host: {_shown(value)} (a hostname, ssh_config alias or IP address: letters, "
                         "digits, '.', '-' and '_'; it must not start with '-')")
    return value


def host_template(value: str) -> str:
    """A node's `host`, where `{name}` stands for the node's name: a host once the name is put in."""
    host(value.replace("{name}", "n"))
    return value


def user(value: str) -> str:
    """A POSIX user name (portable set, at most 32 characters, not starting with '-' or a digit)."""
    if not _USER.fullmatch(value):
        raise ValueError(f"not a user name: {_shown(value)} (letters, digits, '_', '.' and '-', starting with a "
                         "letter or '_', at most 32 characters)")
    return value


def port(value: int) -> int:
    """A TCP port, 1-65535."""
    if not 1 <= value <= 65535:
        raise ValueError(f"port {value} is not in 1-65535")
    return value


def proxy_jump(value: str) -> str:
    """ProxyJump: `none`, or comma-separated `[user@]host[:port]` hops, each checked as above."""
    if value == "none":
        return value
    for hop in value.removeprefix("ssh://").split(","):
        match = _JUMP.fullmatch(hop.removeprefix("ssh://"))
        if match is None:
            raise ValueError(f"not a bastion: {_shown(hop)} (ProxyJump: [user@]host[:port], comma-separated)")
        if match.group("user") is not None:
            user(match.group("user"))
        host(match.group("host"))
        if match.group("port") is not None:
            if not match.group("port").isdigit():
                raise ValueError(f"not a port: {_shown(match.group('port'))} in bastion {_shown(hop)}")
            port(int(match.group("port")))
    return value


def local_path(value: str) -> str:
    """A local file named to SSH (key, ssh_config, known_hosts): no control characters, not an option."""
    if value.startswith("-") or any(ord(c) < 32 or ord(c) == 127 for c in value) or not value.strip():
        raise ValueError(f"not a file path: {_shown(value)} (it must not start with '-' or hold control "
                         "characters)")
    return value
