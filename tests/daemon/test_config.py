"""The daemon config: validated with file:line, the shipped example loads, the systemd unit is hardened."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from reconciler.daemon.config import load_config
from reconciler.loader import DesiredStateError

REPO = Path(__file__).resolve().parents[2]


def test_example_config_loads() -> None:
    """deploy/config.example.yaml is valid."""
    config = load_config(REPO / "deploy" / "config.example.yaml")
    assert config.repository is not None and config.mode in ("enforce", "report")
    assert config.seconds("poll_interval") > 0


def test_config_errors_name_file_line_and_key(tmp_path: Path) -> None:
    """Unknown keys, bad durations and a missing source are reported with file:line and key path."""
    path = tmp_path / "config.yaml"
    path.write_text("repository:\n  url: /srv/git/cluster.git\n  brnch: main\npoll_interval: soon\n"
                    "mode: yolo\n")
    with pytest.raises(DesiredStateError) as info:
        load_config(path)
    errors = [str(e) for e in info.value.errors]
    assert any(e.startswith(f"{path}:3:3: repository.brnch: unknown key") for e in errors), errors
    assert any(e.startswith(f"{path}:4:") and "poll_interval" in e and "not a duration" in e for e in errors), errors
    assert any(e.startswith(f"{path}:5:") and "mode" in e for e in errors), errors
    path.write_text("mode: enforce\n")
    with pytest.raises(DesiredStateError) as info:
        load_config(path)
    assert "exactly one of repository" in str(info.value.errors[0])


def test_systemd_unit_hardening() -> None:
    """The unit restarts on failure and is sandboxed with the state dir writable."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(REPO / "deploy" / "reconciler.service")
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    assert service["NoNewPrivileges"] == "yes" and service["PrivateTmp"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert "/var/lib/reconciler" in service["ReadWritePaths"]
    assert service["ExecStart"].endswith("run --config /etc/reconciler/config.yaml")
    assert service["ExecReload"].startswith("/bin/kill -HUP")
    assert int(service["TimeoutStopSec"]) >= 30
