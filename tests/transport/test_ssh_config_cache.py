"""CachedSSHConfig answers exactly what paramiko's SSHConfig answers (it only skips work), and is linear."""

from __future__ import annotations

import getpass
import time

import paramiko
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.transport.sshconfig import CachedSSHConfig

CONFIG = """\
Host bastion
    HostName 192.0.2.1
    User jump
Host gpu0? !gpu05
    User admin
    Port 2222
Host gpu05
    IdentityFile ~/.ssh/special
Match host gpu1* user root
    Port 2200
Host login01 login02
    HostName %h.example.org
    ProxyCommand nc %h %p
Match originalhost cpu*
    User batch
Host *
    IdentityFile ~/.ssh/id_ed25519
    User root
"""

HOSTS = ["bastion", "gpu01", "gpu05", "gpu09", "gpu10", "gpu123", "login01", "login02", "cpu7", "other",
         "GPU01", "gpu0", "login0"]


@pytest.mark.parametrize("host", HOSTS)
def test_same_answer_as_paramiko(host: str) -> None:
    plain = paramiko.SSHConfig.from_text(CONFIG)
    cached = CachedSSHConfig.from_text(CONFIG)
    assert cached.lookup(host) == plain.lookup(host)
    assert cached.lookup(host) == plain.lookup(host)  # from the cache now


def test_cached_answers_are_copies() -> None:
    cached = CachedSSHConfig.from_text(CONFIG)
    first = cached.lookup("gpu01")
    first["identityfile"].append("/tmp/changed")
    first["user"] = "changed"
    again = cached.lookup("gpu01")
    assert again["user"] == "admin" and "/tmp/changed" not in again["identityfile"]


def test_match_exec_is_never_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Match exec` runs a command whose answer may change: such a config is looked up afresh every time."""
    flag = {"set": False}

    class Result:
        def __init__(self) -> None:
            self.ok = flag["set"]

    monkeypatch.setattr(paramiko.config.invoke, "run", lambda *args, **kwargs: Result())
    cached = CachedSSHConfig.from_text('Match exec "test -e /some/flag"\n    User flagged\n')
    assert cached.lookup("gpu01").get("user") is None
    flag["set"] = True
    assert cached.lookup("gpu01").get("user") == "flagged"


names = st.from_regex(r"[a-z]{1,3}[0-9]{0,3}", fullmatch=True)
patterns = st.lists(st.one_of(names, names.map(lambda n: n + "*"), names.map(lambda n: "!" + n),
                              st.just("*"), names.map(lambda n: n[:1] + "?")), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=6), st.lists(names, min_size=1, max_size=5))
def test_host_patterns_match_like_paramiko(blocks: list[list[str]], hosts: list[str]) -> None:
    text = "".join(f"Host {' '.join(block)}\n    Port {2000 + i}\n    User u{i}\n" for i, block in enumerate(blocks))
    plain = paramiko.SSHConfig.from_text(text)
    cached = CachedSSHConfig.from_text(text)
    for host in hosts:
        assert cached.lookup(host) == plain.lookup(host), (text, host)


def test_lookup_cost_is_linear_in_host_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """One Host block per node (the testbed's and many sites' ssh_config): no getuser() per unmatched block."""
    calls = {"n": 0}
    real = getpass.getuser

    def counted() -> str:
        calls["n"] += 1
        return real()

    monkeypatch.setattr(getpass, "getuser", counted)
    nodes = [f"gpu{i:04d}" for i in range(1000)]
    text = "".join(f"Host {n}\n    HostName 10.0.{i // 250}.{i % 250}\n" for i, n in enumerate(nodes))
    cached = CachedSSHConfig.from_text(text)
    start = time.process_time()
    for node in nodes[:50]:
        assert cached.lookup(node)["hostname"].startswith("10.0.")
    assert calls["n"] <= 50 * 4  # paramiko alone: about 2,000 per lookup here
    assert time.process_time() - start < 5


def test_a_lookup_walks_only_the_blocks_that_can_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """One literal Host block per node: a node's first lookup no longer walks every node's block (issue 32)."""
    walked = {"n": 0}
    real = CachedSSHConfig._pattern_matches

    def counted(self: CachedSSHConfig, patterns: object, target: str) -> bool:
        walked["n"] += 1
        return real(self, patterns, target)

    monkeypatch.setattr(CachedSSHConfig, "_pattern_matches", counted)
    nodes = [f"gpu{i:04d}" for i in range(2000)]
    text = "Host gpu1*\n    Port 2222\n" + "".join(f"Host {n}\n    HostName 10.0.{i // 250}.{i % 250}\n"
                                                     for i, n in enumerate(nodes)) + "Host *\n    User root\n"
    cached = CachedSSHConfig.from_text(text)
    plain = paramiko.SSHConfig.from_text(text)
    for node in nodes[::97]:
        walked["n"] = 0
        assert cached.lookup(node) == plain.lookup(node)
        assert walked["n"] <= 2 * 4, f"{walked['n']} blocks walked for {node}"  # 2 passes: *, gpu1*, its own, Host *


def test_literal_blocks_keep_their_place_among_the_others() -> None:
    """A host named in several blocks, before and after patterns and Match: first value wins, IdentityFile adds up."""
    text = """\
Host gpu01 gpu02
    User first
    IdentityFile ~/.ssh/a
Match host gpu0*
    Port 2200
    IdentityFile ~/.ssh/b
Host gpu01
    User second
    Port 2300
    HostName n1.example.org
    IdentityFile ~/.ssh/c
Host gpu02 gpu01 gpu01
    ProxyJump bastion
Host *
    IdentityFile ~/.ssh/d
"""
    cached = CachedSSHConfig.from_text(text)
    plain = paramiko.SSHConfig.from_text(text)
    for host in ("gpu01", "gpu02", "gpu03", "bastion"):
        assert cached.lookup(host) == plain.lookup(host), host
    assert cached.lookup("gpu01")["user"] == "first" and cached.lookup("gpu01")["port"] == "2200"
