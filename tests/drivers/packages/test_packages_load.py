"""Bad `packages:` input: a load error naming file:line and key path; nothing loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.desired.loader import DesiredStateError, load_dir
from tests.drivers.base_state import write_state

CASES = [
    ('packages:\n  - nodes: gpu01\n    packages:\n      "-rf": present\n',
     "files.yaml:4 packages[0].packages.-rf.[key]", "not a package name: '-rf'"),
    ('packages:\n  - nodes: gpu01\n    packages:\n      tzdata: "1.0;rm -rf /"\n',
     "files.yaml:4 packages[0].packages.tzdata.version", "not a package version or version glob"),
    ('packages:\n  - nodes: gpu01\n    packages:\n      tzdata: {version: "1.*", holdd: true}\n',
     "files.yaml:4 packages[0].packages.tzdata.holdd", "unknown key"),
    ('packages:\n  - nodes: gpu01\n    packages:\n      nano: {version: absent, hold: true}\n',
     "files.yaml:4 packages[0].packages.nano", "a package that is absent cannot be held"),
    ('packages:\n  - nodes: gpu01\n    packages:\n      nano: {needs: reload}\n',
     "files.yaml:4 packages[0].packages.nano.needs", "Input should be 'reboot' or 'driver-reload'"),
    ('packages:\n  - nodes: gpu01\n    allow_downgrade: true\n    packages: {}\n',
     "files.yaml:4 packages[0].packages", "at least 1 item"),
    ('packages:\n  - packages: {nano: present}\n', "files.yaml:2 packages[0]", "say which nodes"),
    ('nodes:\n  - {name: gpu09, package_manager: yum}\n', "files.yaml:2 nodes[0].package_manager", "'apt' or 'dnf'"),
    ('packages:\n  - nodes: gpu01\n    update_cache: false\n    cache_valid_time: 60\n    packages: {nano: present}\n',
     "files.yaml:2 packages[0]", "cache_valid_time asks for a refresh: it cannot go with update_cache: false"),
    ('packages:\n  - nodes: gpu01\n    cache_valid_time: "1h"\n    packages: {nano: present}\n',
     "files.yaml:3 packages[0].cache_valid_time", "Input should be a valid integer"),
    ('packages:\n  - nodes: gpu01\n    cache_valid_time: 0\n    packages: {nano: present}\n',
     "files.yaml:3 packages[0].cache_valid_time", "greater than or equal to 1"),
]


@pytest.mark.parametrize("yaml, where, message", CASES, ids=[c[1].split()[1] + str(i) for i, c in enumerate(CASES)])
def test_load_error(tmp_path: Path, yaml: str, where: str, message: str) -> None:
    """Each fault is one error at its file:line and key path, with the reason."""
    root = write_state(tmp_path / "repo", yaml)
    with pytest.raises(DesiredStateError) as info:
        load_dir(root)
    got = [f"{e.location.file}:{e.location.line} {e.key_path()}: {e.message}" for e in info.value.errors
           if e.location]
    assert len(got) == 1, got
    assert got[0].startswith(where + ":") and message in got[0], got
