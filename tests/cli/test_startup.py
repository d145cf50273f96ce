"""How the command starts (reconciler/cli/startup.py): the collector off while modules load and frozen after, on again
for the command itself (the daemon included); importing reconciler.cli.main as a library changes nothing; the
open-files soft limit raised to the hard one."""

from __future__ import annotations

import json
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
