"""KnownHosts finds a host's keys by name, with paramiko.HostKeys' answers, plain and hashed names (issue 32).

paramiko compared the name with every entry on each lookup (and each add while reading the file): with one line
per node, connecting to N nodes cost O(N^2). The answers must stay paramiko's: the reference below is how
KnownHosts used paramiko.HostKeys before.
"""

from __future__ import annotations

import base64
from pathlib import Path

import paramiko
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.transport import hostkeys
from reconciler.transport.hostkeys import KnownHosts

KEYS = [paramiko.ECDSAKey.generate(bits=256), paramiko.ECDSAKey.generate(bits=256),
        paramiko.ECDSAKey.generate(bits=384), paramiko.ECDSAKey.generate(bits=521)]
NAMES = ["gpu01", "gpu02", "ctl", "[10.0.0.5]:2222", "10.0.0.5"]


def hashed(name: str, salt: bytes) -> str:
    """OpenSSH's hashed form of NAME with SALT (20 bytes)."""
    return paramiko.HostKeys.hash_host(name, base64.b64encode(salt).decode())


def paramiko_answer(text: str, name: str) -> dict[str, bytes]:
    """What KnownHosts answered when it kept a paramiko.HostKeys: keys by type, as bytes."""
    keys = paramiko.HostKeys()
    for number, line in enumerate(text.splitlines(), start=1):
        entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
        if entry is not None and entry.key is not None:
            for host in entry.hostnames:
                keys.add(host, entry.key.get_name(), entry.key)
    found = keys.lookup(name)
    return {keytype: found[keytype].asbytes() for keytype in found} if found else {}


def ours(known: KnownHosts, name: str) -> dict[str, bytes]:
    return {keytype: key.asbytes() for keytype, key in known.lookup(name).items()}


line = st.tuples(st.lists(st.tuples(st.sampled_from(NAMES), st.booleans(), st.binary(min_size=20, max_size=20)),
                          min_size=1, max_size=3),
                 st.sampled_from(KEYS))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(line, min_size=0, max_size=10))
def test_same_answers_as_paramiko(tmp_path: Path, lines: list[tuple[list[tuple[str, bool, bytes]], paramiko.PKey]]
                                  ) -> None:
    """Names repeated across lines and key types, plain and hashed: the same keys for every name."""
    text = "".join(",".join(hashed(name, salt) if is_hashed else name for name, is_hashed, salt in names)
                   + f" {key.get_name()} {key.get_base64()}\n" for names, key in lines)
    path = tmp_path / "known_hosts"
    path.write_text(text)
    known = KnownHosts(path)
    for name in [*NAMES, "other"]:
        assert ours(known, name) == paramiko_answer(text, name), (text, name)
        assert ours(known, name) == paramiko_answer(text, name)  # remembered answer, same


def test_plain_names_are_found_without_comparing_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 nodes, one line each: reading the file and looking nodes up compares no name with other entries."""
    compared = {"n": 0}
    real_paramiko, real_hash = paramiko.HostKeys._hostname_matches, hostkeys._hash_matches

    def counted_paramiko(self: paramiko.HostKeys, hostname: str, entry: object) -> bool:
        compared["n"] += 1
        return bool(real_paramiko(self, hostname, entry))

    def counted_hash(name: str, hashed_name: str) -> bool:
        compared["n"] += 1
        return real_hash(name, hashed_name)

    monkeypatch.setattr(paramiko.HostKeys, "_hostname_matches", counted_paramiko)
    monkeypatch.setattr(hostkeys, "_hash_matches", counted_hash)
    key = KEYS[0]
    nodes = [f"gpu{i:04d}" for i in range(3000)]
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"{node},10.0.{i // 250}.{i % 250} {key.get_name()} {key.get_base64()}\n"
                            for i, node in enumerate(nodes)))
    known = KnownHosts(path)
    for node in nodes[::30]:
        assert ours(known, node) == {key.get_name(): key.asbytes()}
    assert known.lookup("gpu9999") == {}
    assert compared["n"] == 0


def test_hashed_names_hash_once_per_name_and_a_recorded_key_is_seen(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    hashes = {"n": 0}
    real = hostkeys._hash_matches

    def counted(name: str, hashed_name: str) -> bool:
        hashes["n"] += 1
        return real(name, hashed_name)

    monkeypatch.setattr(hostkeys, "_hash_matches", counted)
    key = KEYS[2]
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"{hashed(f'gpu{i:02d}', bytes([i]) * 20)} {key.get_name()} {key.get_base64()}\n"
                            for i in range(50)) + "|1|bm90IHR3ZW50eSBieXRlcw==|AAAA ecdsa-sha2-nistp384 "
                    f"{key.get_base64()}\n")  # a hashed name with a short salt: matches nothing, stops nothing
    known = KnownHosts(path)
    assert ours(known, "gpu07") == {key.get_name(): key.asbytes()}
    assert ours(known, "gpu07") == {key.get_name(): key.asbytes()}
    assert hashes["n"] == 51  # each hashed entry once for gpu07, not again for the second lookup
    assert known.lookup("gpu77") == {}
    known.record("gpu77", KEYS[0])
    assert ours(known, "gpu77") == {KEYS[0].get_name(): KEYS[0].asbytes()}
    assert ours(KnownHosts(path), "gpu77") == {KEYS[0].get_name(): KEYS[0].asbytes()}  # written to the file
