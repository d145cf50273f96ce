"""The daemon config: validated with file:line, the shipped example loads, the systemd unit is hardened."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reconciler.daemon.config import load_config
from reconciler.desired.loader import DesiredStateError

REPO = Path(__file__).resolve().parents[2]


def test_example_config_loads() -> None:
    """deploy/config.example.yaml is valid."""
    config = load_config(REPO / "deploy" / "config.example.yaml")
    assert config.repository is not None and config.mode in ("enforce", "report")
    assert config.seconds("poll_interval") > 0


def config_errors(path: Path, text: str) -> list[str]:
    """Write TEXT as a config file; the load errors it gives (the test fails when it loads)."""
    path.write_text(text)
    with pytest.raises(DesiredStateError) as info:
        load_config(path)
    return [str(e) for e in info.value.errors]


def test_config_errors_name_file_line_and_key(tmp_path: Path) -> None:
    """Unknown keys, bad durations and a missing source are reported with file:line and key path."""
    path = tmp_path / "config.yaml"
    errors = config_errors(path, "repository:\n  url: /srv/git/cluster.git\n  brnch: main\npoll_interval: soon\n"
                                 "mode: yolo\n")
    assert any(e.startswith(f"{path}:3:3: repository.brnch: unknown key") for e in errors), errors
    assert any(e.startswith(f"{path}:4:") and "poll_interval" in e and "not a duration" in e for e in errors), errors
    assert any(e.startswith(f"{path}:5:") and "mode" in e for e in errors), errors
    assert "exactly one of repository" in config_errors(path, "mode: enforce\n")[0]


UNIT = REPO / "deploy" / "reconciler.service"
MAX_EXPOSURE = 4.0


def read_unit() -> configparser.ConfigParser:
    """The shipped unit, parsed (repeated keys such as SystemCallFilter keep their last value)."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(UNIT)
    return unit


def test_systemd_unit_hardening() -> None:
    """The unit runs as its own user, restarts on failure, and is sandboxed with only the state dir writable."""
    service = read_unit()["Service"]
    assert service["User"] == "reconciler" and service["Group"] == "reconciler"
    assert service["Restart"] == "on-failure"
    assert service["NoNewPrivileges"] == "yes" and service["PrivateTmp"] == "yes"
    assert service["ProtectSystem"] == "strict" and service["ProtectHome"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert "/var/lib/reconciler" in service["ReadWritePaths"] and service["StateDirectory"] == "reconciler"
    # what the daemon needs: SSH and HTTPS out (AF_INET*), the metrics listener, git's and ssh's pipes (AF_UNIX)
    assert set(service["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert "PrivateNetwork" not in service and "IPAddressDeny" not in service
    assert "HOME=/var/lib/reconciler" in service["Environment"]
    assert service["ExecStart"].endswith("run --config /etc/reconciler/config.yaml")
    assert service["ExecReload"].startswith("/bin/kill -HUP")
    assert int(service["TimeoutStopSec"]) >= 30


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze (Debian's systemd)")
def test_systemd_analyze_security_rates_the_unit_at_most_4() -> None:
    """`systemd-analyze security --offline=true` (systemd >= 252) gives the unit an exposure of at most 4.0."""
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", str(UNIT)], capture_output=True,
                         text=True, timeout=60)
    match = re.search(r"Overall exposure level for reconciler\.service: (\d+\.\d)", out.stdout)
    assert match, out.stdout[-2000:] + out.stderr
    assert float(match.group(1)) <= MAX_EXPOSURE, out.stdout
    print(f"\nsystemd-analyze security: {match.group(1)}")


def test_pair_configs_load_and_name_each_other() -> None:
    """deploy/pair/config.login{1,2}.yaml are valid and mirror each other."""
    one = load_config(REPO / "deploy" / "pair" / "config.login1.yaml")
    two = load_config(REPO / "deploy" / "pair" / "config.login2.yaml")
    assert one.ha is not None and two.ha is not None
    assert (one.ha.name, [p.name for p in one.ha.peers]) == ("login1", ["login2"])
    assert (two.ha.name, [p.name for p in two.ha.peers]) == ("login2", ["login1"])
    assert one.ha.lease_dir == two.ha.lease_dir and one.ha.lease_node == two.ha.lease_node


def test_ha_section_errors(tmp_path: Path) -> None:
    """A renewal slower than half the lease, a relative directory and a peer URL with credentials are refused."""
    path = tmp_path / "config.yaml"
    errors = " | ".join(config_errors(path, "watch: /srv/state\nha:\n  lease_duration: 10s\n  renew_interval: 6s\n"
                                            "  lease_dir: ha\n  peers: [{name: b, url: 'http://u:p@login2:9464'}]\n"))
    assert "must be an absolute path" in errors and "without credentials" in errors, errors
    assert "at most half of lease_duration" in config_errors(
        path, "watch: /srv/state\nha:\n  lease_duration: 10s\n  renew_interval: 6s\n")[0]
