"""The fact script itself, run here with the system python3 as on a node: its JSON writer (no `json` module on
the node), its command runner (posix_spawn, no `subprocess`), one-shot and agent modes.

The writer is checked against the client's `json.loads` with Hypothesis (hostile strings included); the runner
against real processes: exit codes, signals, a timeout that kills the command's whole process group, stdin
closed so a command can never eat the agent's next request.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.facts.gather import AGENT_COMMAND, GATHER_COMMAND, SCRIPT_FUNCTIONS, FactRequest

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"  # the system python, as nodes have


def script_namespace() -> dict[str, Any]:
    """The script's functions, loaded into this process."""
    namespace: dict[str, Any] = {}
    exec(SCRIPT_FUNCTIONS, namespace)  # noqa: S102 - our own script, to test its functions
    return namespace


SCRIPT = script_namespace()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_writer_round_trips_through_json_loads(value: Any) -> None:
    """Whatever the script writes, the client's json.loads reads back as the same value (control characters,
    quotes, backslashes, non-ASCII and lone surrogates included), on one line."""
    encoded: bytes = SCRIPT["enc"](value).encode("utf-8", "backslashreplace")
    assert b"\n" not in encoded and b"\r" not in encoded
    assert json.loads(encoded.decode("utf-8")) == value


def test_writer_matches_json_for_a_fact_document() -> None:
    """A typical answer: the same document json.dumps would give, byte for byte once parsed."""
    doc = {"files": {"/etc/a b\"c": {"exists": True, "content": "x\ty\u0000\u007f\u2028é\n", "size": 7}},
           "commands": {"v": {"rc": None, "stdout": "", "stderr": "timed out"}}}
    assert json.loads(SCRIPT["enc"](doc)) == json.loads(json.dumps(doc))


def run(cmd: str, timeout: float = 10) -> tuple[int | None, str, str]:
    result: tuple[int | None, str, str] = SCRIPT["run"](cmd, timeout, dict(os.environ, LC_ALL="C"))
    return result


def test_runner_reports_output_and_exit_codes() -> None:
    assert run("echo out; echo err >&2; exit 3") == (3, "out\n", "err\n")
    assert run("printf 'caf\\303\\251 \\377'") == (0, "café \ufffd", "")
    assert run("kill -TERM $$")[0] == -15  # killed by a signal: negative, as subprocess says
    assert run("no-such-command-here")[0] == 127
    big = run("head -c 300000 /dev/zero | tr '\\0' x")
    assert big[0] == 0 and len(big[1]) == 300000


def test_runner_closes_stdin() -> None:
    """A command reading stdin gets EOF at once: in agent mode stdin carries the next requests."""
    start = time.monotonic()
    assert run("cat; echo done") == (0, "done\n", "")
    assert time.monotonic() - start < 5


def test_runner_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    """At the deadline the command and what it started are killed; nothing outlives it holding the pipes."""
    marker = tmp_path / "child.pid"
    start = time.monotonic()
    code, _, err = run(f"sleep 60 & echo $! > {marker}; sleep 60", timeout=1)
    assert (code, err) == (None, "timed out") and time.monotonic() - start < 10
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        time.sleep(0.05)
    state = Path(f"/proc/{child}/stat").read_text().split()[2] if Path(f"/proc/{child}").exists() else "gone"
    assert state in ("gone", "Z"), f"the background child {child} survived the timeout ({state})"


def test_runner_does_not_wait_for_a_daemonised_grandchild_past_its_exit() -> None:
    """A command that exits while a grandchild it detached still runs (with its output redirected) returns."""
    start = time.monotonic()
    assert run("(setsid sleep 30 >/dev/null 2>&1 &); echo ok") == (0, "ok\n", "")
    assert time.monotonic() - start < 5


def one_shot(request: FactRequest) -> dict[str, Any]:
    done = subprocess.run(["sh", "-c", GATHER_COMMAND.replace("python3 ", f"{PYTHON} ", 1)],
                          input=request.encode(), capture_output=True, text=True, timeout=60, check=True)
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def test_one_shot_reads_files_stats_and_hostile_paths(tmp_path: Path) -> None:
    odd = tmp_path / "we'ird \"name\" é\n.conf"
    odd.write_bytes(b"line one\nline \xff two\n")
    odd.chmod(0o640)
    answer = one_shot(FactRequest(files=[str(odd), str(tmp_path / "missing")], stats=[str(odd)],
                                  hashes=[], commands={"id": "id -u"}))
    item = answer["files"][str(odd)]
    assert item["exists"] and item["mode"] == "0640" and item["content"] == "line one\nline \ufffd two\n"
    assert answer["files"][str(tmp_path / "missing")] == {"exists": False}
    assert answer["stats"][str(odd)]["size"] == odd.stat().st_size
    assert answer["commands"]["id"] == {"rc": 0, "stdout": f"{os.getuid()}\n", "stderr": ""}


def test_agent_answers_each_line_fresh_and_survives_a_bad_request(tmp_path: Path) -> None:
    """Agent mode: one answer line per request line, read from the node each time (nothing cached), a
    request it cannot read answered with an error (the agent goes on), EOF ends it with status 0."""
    watched = tmp_path / "watched"
    watched.write_text("first\n")
    command = AGENT_COMMAND.replace("python3 ", f"{PYTHON} ", 1)
    agent = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert agent.stdin is not None and agent.stdout is not None

    def ask(line: str) -> dict[str, Any]:
        assert agent.stdin is not None and agent.stdout is not None
        agent.stdin.write(line + "\n")
        agent.stdin.flush()
        answer: dict[str, Any] = json.loads(agent.stdout.readline())
        return answer

    try:
        first = ask(FactRequest(files=[str(watched)], commands={"cat": "cat"}).encode(request_id=1))
        assert first["id"] == 1 and first["files"][str(watched)]["content"] == "first\n"
        assert first["commands"]["cat"] == {"rc": 0, "stdout": "", "stderr": ""}  # stdin closed for commands
        watched.write_text("second\n")
        assert "error" in ask("{'files': [")
        second = ask(FactRequest(files=[str(watched)]).encode(request_id=2))
        assert second["id"] == 2 and second["files"][str(watched)]["content"] == "second\n"
        agent.stdin.close()
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
        agent.wait()


def test_request_is_an_ascii_python_literal() -> None:
    """The request the script evaluates: ASCII only, one line, hostile strings kept exact."""
    hostile = "/etc/x'\"\n\\\u2028é\udcff"
    text = FactRequest(files=[hostile], commands={"c": "echo '$(x)'"}).encode(request_id=7)
    assert text.isascii() and "\n" not in text
    assert eval(text, {"__builtins__": {}})["files"] == [hostile]  # noqa: S307 - what the node does


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="the system python3")
def test_script_imports_little() -> None:
    """The point of the script's shape: no json, subprocess, hashlib, socket or re loaded on the node."""
    probe = SCRIPT_FUNCTIONS + "\nimport sys\nprint(' '.join(sorted(sys.modules)))\n"
    loaded = subprocess.run([PYTHON, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True,
                            timeout=30).stdout.split()
    assert not {"json", "subprocess", "hashlib", "socket", "re"} & set(loaded), loaded


KERNEL_YAML = """kernel:
  modules:
    - roles: [compute]
      name: nvidia
      state: loaded
      options: {NVreg_EnableGpuFirmware: "0"}
  sysctls:
    - roles: [compute]
      values: {net.ipv4.tcp_keepalive_time: 600}
"""
PACKAGES_YAML = 'packages:\n  - roles: [compute]\n    packages: {bash: present, zstd: absent, tzdata: "2026b-0+deb12u1"}\n'


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="the system python3")
def test_the_drivers_snippets_import_little(tmp_path: Path) -> None:
    """The drivers' inline snippets run inside the fact script on every node of every plan: each one runs to its
    end (rc 0) and loads none of the modules the script avoids (the mount points' `import json, re` cost ~7 ms
    of every node's ~12 ms, issue 43 item 10)."""
    from drivers import all_drivers
    from reconciler.desired.loader import load_dir
    from reconciler.engine.context import Context
    from reconciler.engine.gather import build_request

    root = tmp_path / "desired-state"
    shutil.copytree(Path(__file__).resolve().parents[2] / "desired-state", root)
    (root / "kernel.yaml").write_text(KERNEL_YAML)
    (root / "packages.yaml").write_text(PACKAGES_YAML)
    ctx = Context(loaded=load_dir(root), source="test")
    snippets: dict[str, str] = {}
    for spec in ctx.targets():
        snippets.update(build_request(ctx, spec.name, all_drivers()).python)
    assert {"mountinfo", "mountpoints_created", "kernel_modules", "sysctls", "packages"} <= set(snippets), snippets
    request = FactRequest(python=snippets, timeout=20).encode()
    probe = (SCRIPT_FUNCTIONS + f"\nimport sys\nprint(answer({request!r}).decode())\n"
             "print(' '.join(sorted(sys.modules)))\n")
    out = subprocess.run([PYTHON, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True,
                         timeout=60).stdout.splitlines()
    answers = json.loads(out[0])["commands"]
    assert {name: answers[name]["rc"] for name in snippets} == dict.fromkeys(snippets, 0), answers
    assert not {"json", "subprocess", "hashlib", "socket", "re"} & set(out[1].split()), out[1]
