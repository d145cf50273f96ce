"""Fixtures for the transport tests: a client key, and real sshd servers started on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.transport.sshd_server import Sshd, keygen, start_sshd


@pytest.fixture(scope="session")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The key the transport logs in with: (private key path, public key)."""
    path = tmp_path_factory.mktemp("client") / "id_ed25519"
    return path, keygen(path)


@pytest.fixture
def sshd_factory(tmp_path: Path, client_key: tuple[Path, str]) -> Iterator[Callable[..., Sshd]]:
    """Start as many sshd servers as a test wants (`extra` adds sshd_config lines); all stopped after."""
    servers: list[Sshd] = []

    def start(extra: str = "") -> Sshd:
        server = start_sshd(tmp_path / f"sshd{len(servers)}", client_key[1], extra)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def sshd(sshd_factory: Callable[..., Sshd]) -> Sshd:
    """One running sshd."""
    return sshd_factory()
