"""Fencing in the remote writer (groundwork of issue 25): a request carrying an older epoch than the node has seen
is refused whole and changes nothing; each fenced write is journaled with its epoch. The real writer script,
run by a real `sh -c` as the transport would, on files in a temporary directory."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from reconciler.engine.ops import WriteFile
from reconciler.engine.remote_write import WRITE_COMMAND, write_request


def write(path: Path, content: str, fence: dict[str, object] | None) -> list[dict[str, object]]:
    """Run the writer once for one file; its JSON results."""
    request = write_request([WriteFile(path=str(path), content=content, mode="0644", owner=None, group=None)], fence)
    done = subprocess.run(["sh", "-c", WRITE_COMMAND], input=request, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_older_epoch_is_refused_and_changes_nothing_newer_one_takes_over(tmp_path: Path) -> None:
    target, fence_dir = tmp_path / "etc" / "x.conf", tmp_path / "fence"
    assert write(target, "one\n", {"epoch": 3, "holder": "login01", "dir": str(fence_dir)}) == [{"ok": True}]
    assert write(target, "two\n", {"epoch": 4, "holder": "login02", "dir": str(fence_dir)}) == [{"ok": True}]
    stale = write(target, "stale\n", {"epoch": 3, "holder": "login01", "dir": str(fence_dir)})
    assert stale == [{"ok": False, "error": "fenced: epoch 3 of login01 is older than epoch 4 of login02, seen on "
                                            "this node"}]
    assert target.read_text() == "two\n"
    assert json.loads((fence_dir / "fence.json").read_text())["epoch"] == 4
    journal = [json.loads(line) for line in (fence_dir / "writes.log").read_text().splitlines()]
    assert [(j["epoch"], j["holder"], j["path"]) for j in journal] == [(3, "login01", str(target)),
                                                                       (4, "login02", str(target))]


def test_unfenced_requests_write_as_before(tmp_path: Path) -> None:
    target = tmp_path / "y.conf"
    assert write(target, "plain\n", None) == [{"ok": True}]
    assert target.read_text() == "plain\n"
