"""Inline Python in the fact script: snippets run in the script's own process; supervisord asked over its socket.

The supervisord test runs a real supervisord (the testbed's Debian package) on a socket in tmp_path and compares
the inline snippet's answer with `supervisorctl status` on the same daemon, line for line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from reconciler.facts import parsers
from reconciler.facts.gather import GATHER_COMMAND, FactRequest
from reconciler.facts.services import status_python
from reconciler.model import ServiceManager


def _gather(request: FactRequest) -> dict[str, dict[str, object]]:
    done = subprocess.run(["sh", "-c", GATHER_COMMAND], input=request.encode(), capture_output=True, text=True,
                          timeout=60, check=True)
    commands: dict[str, dict[str, object]] = json.loads(done.stdout)["commands"]
    return commands


def test_inline_snippets_report_like_commands() -> None:
    """A snippet's `stdout` comes back as rc 0; one that raises as rc 1 with the error; shell commands still run."""
    found = _gather(FactRequest(commands={"shell": "echo hi"},
                                python={"ok": "stdout = 'x\\n' * 2", "bad": "raise ValueError('no socket')",
                                        "mounts": "stdout = open('/proc/self/mountinfo').read()"}))
    assert found["shell"] == {"rc": 0, "stdout": "hi\n", "stderr": ""}
    assert found["ok"] == {"rc": 0, "stdout": "x\nx\n", "stderr": ""}
    assert found["bad"]["rc"] == 1 and found["bad"]["stderr"] == "ValueError: no socket"
    assert parsers.parse_mountinfo(str(found["mounts"]["stdout"]))


@pytest.fixture()
def supervisord(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A supervisord on tmp_path/s.sock: alpha running, grp:beta running, gamma never started."""
    binary = shutil.which("supervisord") or "/usr/bin/supervisord"
    if not Path(binary).exists():
        pytest.fail("supervisord not found: deploy/testbed/testbed deps installs it")
    sock = tmp_path / "s.sock"
    conf = tmp_path / "supervisord.conf"
    conf.write_text(f"""[unix_http_server]
file={sock}
[supervisord]
logfile={tmp_path}/supervisord.log
pidfile={tmp_path}/supervisord.pid
childlogdir={tmp_path}
nodaemon=true
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://{sock}
[program:alpha]
command=sleep 600
startsecs=0
[program:beta]
command=sleep 600
startsecs=0
[group:grp]
programs=beta
[program:gamma]
command=sleep 600
autostart=false
""")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            out = subprocess.run(["supervisorctl", "-c", str(conf), "status"], capture_output=True, text=True).stdout
            if "alpha" in out and "RUNNING" in out and out.count("RUNNING") >= 2:
                break
            time.sleep(0.2)
        yield conf, sock
    finally:
        proc.terminate()
        proc.wait(20)


def test_supervisor_status_inline_equals_supervisorctl(supervisord: tuple[Path, Path], tmp_path: Path) -> None:
    """The inline XML-RPC snippet prints what `supervisorctl status` prints (names, groups, states)."""
    conf, sock = supervisord
    manager = ServiceManager(type="supervisord")
    snippet = status_python(manager, ["alpha", "beta"], sockets=(str(tmp_path / "missing.sock"), str(sock)))
    assert snippet is not None
    found = _gather(FactRequest(python={"services": snippet}))["services"]
    assert found["rc"] == 0, found
    expected = subprocess.run(["supervisorctl", "-c", str(conf), "status"], capture_output=True, text=True).stdout
    ours = parsers.parse_supervisorctl_status(str(found["stdout"]))
    theirs = parsers.parse_supervisorctl_status(expected)
    assert set(ours) == set(theirs) >= {"alpha", "beta", "gamma"}
    assert {k: v.running for k, v in ours.items()} == {k: v.running for k, v in theirs.items()}
    assert ours["alpha"].running and not ours["gamma"].running
    assert [line.split()[:2] for line in str(found["stdout"]).splitlines()] == \
        [line.split()[:2] for line in expected.splitlines()]


def test_no_inline_status_for_systemd() -> None:
    """systemd keeps its `systemctl is-active` command (a few ms, no Python)."""
    assert status_python(ServiceManager(type="systemd"), ["slurmd"]) is None
