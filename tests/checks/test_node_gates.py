"""The upgrade's node gates (checks/node_gates.py): a site's command and LBNL NHC, run by a real `sh` (NHC is the
testbed's STAND-IN, deploy/testbed/standins/nhc, which answers in NHC's own form); what fails, what passes, and
what reaches the node's drain reason."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from reconciler.checks.node_gates import (
    NHC_ABSENT,
    OUTPUT_CHARS,
    command_line,
    judge_command,
    judge_nhc,
    nhc_command,
)
from reconciler.drivers.slurm_reboot import failed_reason
from reconciler.model.upgrade import CommandGate

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "deploy" / "testbed" / "standins" / "nhc"


def sh(command: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """COMMAND in a real sh: exit status and stdout."""
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, check=False)
    return done.returncode, done.stdout


def test_a_passing_command_passes_and_a_failing_one_names_itself_its_exit_and_its_output() -> None:
    gate = CommandGate(command="echo checking ib0; echo 'ib0: rate 200 Gb/s, want 400' >&2; exit 3")
    rc, out = sh(command_line(gate, 30))
    verdict = judge_command(gate, 30, rc, out)
    assert rc == 3 and verdict.why == "command gate echo: exit 3: checking ib0 / ib0: rate 200 Gb/s, want 400"
    ok = CommandGate(command="true", name="noop")
    assert judge_command(ok, 30, *sh(command_line(ok, 30))).why is None


def test_a_command_past_its_timeout_fails_as_timed_out() -> None:
    gate = CommandGate(command="sleep 30", name="slow")
    rc, out = sh(command_line(gate, 1))
    assert rc == 124
    assert judge_command(gate, 1, rc, out).why == "command gate slow: timed out after 1s: no output"


def test_long_output_keeps_its_end_and_the_reason_stays_one_bounded_line() -> None:
    gate = CommandGate(command="for i in $(seq 200); do echo line $i; done; exit 1", name="chatty")
    why = judge_command(gate, 30, *sh(command_line(gate, 30))).why
    assert why is not None and why.endswith("line 199 / line 200")
    assert len(why) <= len("command gate chatty: exit 1: ") + OUTPUT_CHARS
    reason = failed_reason("abc123", why)
    assert "\n" not in reason and len(reason) <= 240 and "line 200" in reason


def test_a_command_with_quotes_and_dollars_reaches_sh_as_written(tmp_path: Path) -> None:
    target = tmp_path / "a b $HOME \"q\""
    gate = CommandGate(command=f"test -e '{target}' || {{ echo \"missing: it's gone\"; exit 1; }}")
    assert judge_command(gate, 30, *sh(command_line(gate, 30))).why == "command gate test: exit 1: missing: it's gone"
    target.write_text("")
    assert judge_command(gate, 30, *sh(command_line(gate, 30))).why is None


@pytest.fixture
def nhc_path(tmp_path: Path) -> dict[str, str]:
    """A PATH with the NHC stand-in as `nhc`, its log and failure file moved under TMP_PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    text = STANDIN.read_text().replace("/var/log/nhc-standin.log", str(tmp_path / "nhc.log"))
    text = text.replace("/etc/nhc/standin-fail", str(tmp_path / "fail"))
    (bindir / "nhc").write_text(text)
    (bindir / "nhc").chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def test_nhc_passes_fails_with_its_message_and_is_told_to_leave_slurm_alone(tmp_path: Path,
                                                                            nhc_path: dict[str, str]) -> None:
    rc, out = sh(nhc_command(300), nhc_path)
    assert rc == 0 and judge_nhc(rc, out).why is None and judge_nhc(rc, out).note is None
    (tmp_path / "fail").write_text("check_fs_mount_rw:  /scratch not mounted\n")
    rc, out = sh(nhc_command(300), nhc_path)
    assert rc == 1
    assert judge_nhc(rc, out).why == "nhc gate: exit 1: check_fs_mount_rw: /scratch not mounted"
    calls = (tmp_path / "nhc.log").read_text().splitlines()
    assert calls == ["-l - -t 300 MARK_OFFLINE=0 DETACHED_MODE=0"] * 2


def test_a_node_without_nhc_passes_and_says_it_was_not_run(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out = sh(nhc_command(60), {"PATH": str(empty)})
    verdict = judge_nhc(rc, out)
    if shutil.which("nhc", path="/usr/sbin:/sbin"):
        pytest.skip("this machine has a real nhc in /usr/sbin")
    assert rc == 0 and NHC_ABSENT in out
    assert verdict.why is None and verdict.note == "nhc is not installed: not run"


def test_nhc_cut_off_fails() -> None:
    assert judge_nhc(None, "").why == "nhc gate: cut off (timed out or connection lost): no output"
