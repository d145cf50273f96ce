"""The daemon decrypts with `age_identity` from its config; a commit it cannot decrypt is invalid (nothing applied)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.store import Store
from reconciler.desired.agesecrets import NO_IDENTITY
from tests.desired.secrets.conftest import PLAIN, SENTINEL, Key


def daemon(tmp_path: Path, watch: Path, **config: Any) -> Reconciler:
    """A local-mode daemon (not started) on WATCH, its config file's directory TMP_PATH."""
    cfg = DaemonConfig.model_validate({"watch": str(watch), "mode": "report", "metrics_listen": None,
                                       "state_dir": str(tmp_path / "daemon-state"), **config})
    cfg.state_path.mkdir(parents=True, exist_ok=True)
    return Reconciler(cfg, Store(cfg.state_path / "state.db"), Metrics(), threading.Event(), config_dir=tmp_path)


def test_daemon_decrypts_with_its_configured_identity(tmp_path: Path, state: Path, key: Key) -> None:
    relative = str(key.identity.relative_to(tmp_path))  # relative to the config file's directory
    rec = daemon(tmp_path, state, age_identity=relative)
    target, _ = rec.targets.resolve_local(state)
    assert target is not None and target.loaded.state.files[0].text() == PLAIN
    head = rec.store.get("head_status")
    assert head["status"] == "valid"


def test_wrong_or_missing_identity_makes_the_state_invalid(tmp_path: Path, state: Path, other_key: Key) -> None:
    for config, message in (({"age_identity": str(other_key.identity)}, "cannot decrypt"), ({}, NO_IDENTITY)):
        rec = daemon(tmp_path / str(len(config)), state, **config)
        target, _ = rec.targets.resolve_local(state)
        assert target is None
        head = rec.store.get("head_status")
        assert head["status"] == "invalid"
        assert any(e.startswith("files.yaml:5:5: files[0].source: ") and message in e for e in head["errors"])
        assert SENTINEL not in repr(head) + repr(rec.store.runs(5))


def test_run_refuses_to_start_with_an_unreadable_identity(tmp_path: Path, state: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"watch: {state}\nstate_dir: {tmp_path / 's'}\nmetrics_listen: null\n"
                      "age_identity: absent.key\n")
    result = CliRunner().invoke(main, ["run", "--config", str(config), "--once"])
    assert result.exit_code == 2 and "age_identity: age identity" in result.stderr and "cannot read" in result.stderr
