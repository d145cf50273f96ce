"""The remote writer on a full file system (issue 22's disk-full fault): the old file stays whole, nothing of the
new one is left behind (its temp copy used the space the backup needed), and the error says ENOSPC."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.engine.ops import WriteFile
from reconciler.engine.remote_write import BACKUP_SUFFIX, WRITE_COMMAND, write_request

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")

OLD = "old line\n" * 8000  # 72 KB: 18 pages
NEW = "new line\n" * 8000


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs holding the old file and its backup."""
    target = tmp_path / "etc"
    target.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(target)], check=True)
    try:
        (target / "app.conf").write_text(OLD)
        (target / f"app.conf{BACKUP_SUFFIX}").write_text(OLD)
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def fill_leaving(directory: Path, free: int) -> None:
    """Fill DIRECTORY's file system, then give back FREE bytes."""
    fill = directory / "fill"
    subprocess.run(["dd", "if=/dev/zero", f"of={fill}", "bs=4k"], capture_output=True)
    os.truncate(fill, max(0, fill.stat().st_size - free))


@pytest.mark.parametrize("free", [0, 24 * 4096], ids=["new-copy-fails", "backup-fails"])
def test_full_disk_keeps_the_old_file_and_leaves_no_temp_copy(small_fs: Path, free: int) -> None:
    """No room for the new copy, or room for it but not for the backup: the same outcome."""
    fill_leaving(small_fs, free)
    op = WriteFile(path=str(small_fs / "app.conf"), content=NEW, mode="0644")
    done = subprocess.run(["sh", "-c", WRITE_COMMAND], input=write_request([op]), capture_output=True, text=True,
                          timeout=60, check=True)
    [result] = json.loads(done.stdout)
    assert result["ok"] is False
    assert "No space left on device" in result["error"] and "(ENOSPC)" in result["error"], result
    assert (small_fs / "app.conf").read_text() == OLD
    assert sorted(p.name for p in small_fs.iterdir()) == ["app.conf", f"app.conf{BACKUP_SUFFIX}", "fill"]
