"""Staging's side of a promotion test without a testbed: its store and its listener serving /promotion.json (the
`staging` fixture of tests/daemon/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from reconciler.daemon.metrics import Metrics
from reconciler.daemon.promotion_http import answer_json
from reconciler.daemon.store import Store
from tests.transport.sshd_server import free_port


class Staging:
    """Staging's side: its store and its listener serving /promotion.json (stopped and started again at will)."""

    def __init__(self, db: Path, name: str = "staging") -> None:
        self.db, self.store, self.port, self.server, self.name = db, Store(db), free_port(), None, name

    def serve(self) -> None:
        self.server = Metrics().serve(f"127.0.0.1:{self.port}", None, None, None,
                                      lambda: answer_json(self.db, self.name))

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
