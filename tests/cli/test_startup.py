"""How the command starts (reconciler/cli/startup.py): the collector off while modules load and frozen after, on again
for the command itself (the daemon included); importing reconciler.cli.main as a library changes nothing; the
open-files soft limit raised to the hard one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, os, resource, sys
{before}
from reconciler.cli.main import main
seen = {{}}
import reconciler.cli.main as cli

@cli.main.command("probe-gc")
def probe() -> None:
    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count(),
                plugins=os.environ.get("PYDANTIC_DISABLE_PLUGINS"),
                nofile=resource.getrlimit(resource.RLIMIT_NOFILE)[0])

try:
    main(["probe-gc"])
except SystemExit:
    pass
print(json.dumps(seen))
"""


def probe(before: str, limit: int | None = None) -> dict[str, object]:
    prefix = [] if limit is None else ["prlimit", f"--nofile={limit}:{limit * 4}", "--"]
    done = subprocess.run([*prefix, sys.executable, "-c", PROBE.format(before=before)], capture_output=True, text=True,
                          cwd=REPO, timeout=60, check=True)
    seen: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_console_start_freezes_the_import_heap_and_collects_during_the_command() -> None:
    seen = probe("from reconciler.cli import startup\nstartup.begin()\nassert not gc.isenabled()", limit=1024)
    assert seen["enabled"] is True, seen  # the command (a daemon too) runs with the collector on
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 10000, seen  # the imported modules' objects
    assert seen["plugins"] == "__all__"
    assert seen["nofile"] == 4096  # raised to the hard limit


def test_library_import_changes_nothing() -> None:
    seen = probe("", limit=1024)
    assert seen == {"enabled": True, "frozen": 0, "plugins": None, "nofile": 1024}, seen


def test_user_choice_of_pydantic_plugins_is_kept() -> None:
    seen = probe("os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'logfire'\nfrom reconciler.cli import startup\n"
                 "startup.begin()")
    assert seen["plugins"] == "logfire"


def test_console_script_points_at_startup() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert 'reconciler = "reconciler.cli:main"' in text


PLAN_PROBE = """
import sys
from reconciler.cli.main import main
try:
    main(["plan", {directory!r}])
except SystemExit as exc:
    print("exit", exc.code)
print(" ".join(sorted(m for m in sys.modules if m.startswith("reconciler."))))
"""

NODES_UNREACHABLE = """ssh:
  known_hosts: {known_hosts}
  identity_file: {known_hosts}
  user: root
  port: 1
  host_key_policy: reject
  connect_timeout: 5
nodes:
  - {{name: login01, host: 127.0.0.1, roles: [controller, login]}}
  - {{name: nfs01, host: 127.0.0.1, roles: [nfs-server]}}
  - {{name: "dgx[01-04]", host: 127.0.0.1, roles: [compute]}}
"""


def test_a_plan_imports_no_rollout_machinery(tmp_path: Path) -> None:
    """A plan shows its waves (rollout/preview.py) but runs no gate, check or upgrade: the cold plan of every user
    does not import the runner, its gates and the checks (~40 ms of CPU on the critical path, issue 43 item 10).
    The plan runs to its end: every node refused (port 1), exit 1, the waves still computed."""
    root = tmp_path / "desired-state"
    shutil.copytree(REPO / "desired-state", root)
    (tmp_path / "known_hosts").write_text("")
    (root / "nodes.yaml").write_text(NODES_UNREACHABLE.format(known_hosts=tmp_path / "known_hosts"))
    done = subprocess.run([sys.executable, "-c", PLAN_PROBE.format(directory=str(root))], capture_output=True,
                          text=True, cwd=REPO, timeout=120, check=True)
    *_, exit_line, modules = done.stdout.strip().splitlines()
    assert exit_line == "exit 1" and "unreachable" in done.stdout, done.stdout[-2000:]
    loaded = set(modules.split())
    assert "reconciler.rollout.preview" in loaded and "reconciler.rollout.waves" in loaded
    assert not {"reconciler.rollout.runner", "reconciler.checks.gates", "reconciler.rollout.upgrade",
                "reconciler.checks.upgrade_gates", "reconciler.checks.runner"} & loaded, sorted(loaded)
