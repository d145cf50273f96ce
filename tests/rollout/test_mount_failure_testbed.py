"""A mount whose source path is missing below an export fails on the canary: the rollout record names the mount
(node, mount point, source) and the mount's error, and the rollback removes the empty mount point the mount
driver created, never a directory that was there before or that holds anything.

Real `reconciler run` daemons, real NFS exports and mounts in the testbed's network namespaces, real Slurm. The
rollback is interrupted once (SIGKILL while it waits at a failpoint) so the test can put a file into one created
mount point first; the restarted daemon finishes it from its journal.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.drivers.mountpoints import RECORD
from tests.daemon.harness import DaemonProcess
from tests.rollout.conftest import COMPUTES, RolloutBed, journal

pytestmark = pytest.mark.timeout(900)
SOURCES = {"/data": "ctl:/srv/shared/missing-a", "/pre": "ctl:/srv/shared/missing-b",
           "/kept": "ctl:/srv/shared/missing-c"}
MOUNTS = "".join(f"    - source: {src}\n      mountpoint: {mp}\n      nodes: gpu[01-16]\n" for mp, src in SOURCES.items())


def _rolled_back(daemon: DaemonProcess, commit: str) -> dict[str, Any]:
    return daemon.wait_for(f"{commit[:12]} rolled back",
                           lambda: (daemon.status().get("rolled_back") or {}).get(commit), 300)


def test_failed_mount_is_named_and_its_empty_mount_point_removed_on_rollback(rbed: RolloutBed) -> None:
    for running in rbed.started:  # one daemon on the cluster: this test's
        running.stop()
    rbed.exec("gpu01", f"rm -rf /data /kept /pre {RECORD} && mkdir /pre")  # /pre: there before, empty
    fstab = rbed.on_all("cat /etc/fstab")
    first = rbed.daemon(failpoints="rollback.before-apply=sleep(120)")
    first.wait_applied(rbed.remote.head(), timeout=300)

    bad = rbed.remote.commit("mount paths that do not exist below the export",
                             {"storage.yaml": lambda text: text.replace("images:\n", MOUNTS + "images:\n")})
    first.wait_for("the rollback", lambda: (j := journal(first.state_dir)) is not None and j.get("commit") == bad
                   and j.get("phase") == "rolling-back", 300)
    first.kill()
    # The failed apply left the mount points it made on the canary (and only there).
    assert rbed.exec("gpu01", "ls -d /data /kept /pre").split() == ["/data", "/kept", "/pre"]
    assert rbed.exec("gpu01", f"cat {RECORD}").split() == ["/data", "/kept"]  # /pre was there: not ours
    assert rbed.on_all("test -e /data && echo yes || echo no") == {n: "yes" if n == "gpu01" else "no"
                                                                   for n in COMPUTES}
    rbed.exec("gpu01", "echo 'not yours' > /kept/notes")  # someone uses it before the rollback runs

    second = rbed.daemon(state_dir=first.state_dir)
    record = _rolled_back(second, bad)
    assert record["gate"] == "apply" and record["nodes"] == "gpu01", record
    failed = {f["resource"]: f for f in record["failed"]}
    assert set(failed) == {f"mount {mp}" for mp in SOURCES}, record
    for mp, source in SOURCES.items():
        item = failed[f"mount {mp}"]
        assert item["node"] == "gpu01" and item["driver"] == "mounts", item
        assert item["summary"] == f"mount {source} on {mp}", item
        assert item["error"].startswith(f"mount {source} on {mp}: mount.nfs"), item  # mount's own words
        assert source.split(":", 1)[1] in item["error"] or "No such file or directory" in item["error"], item
    assert "gpu01: mount ctl:/srv/shared/missing-a on /data: " in record["message"], record

    # The rollback removed the empty directory it made; the one there before and the one in use stay.
    assert rbed.exec("gpu01", "ls -d /data 2>/dev/null || echo absent").strip() == "absent"
    assert rbed.exec("gpu01", "ls -A /pre && echo present").strip() == "present"
    assert rbed.exec("gpu01", "cat /kept/notes").strip() == "not yours"
    assert "/data" not in rbed.exec("gpu01", f"cat {RECORD}").split()
    assert rbed.on_all("cat /etc/fstab") == fstab
    assert rbed.on_all("mountpoint -q /shared && echo mounted || echo no") == {n: "mounted" for n in COMPUTES}
    assert rbed.drained() == {}

    good = rbed.remote.commit("drop the bad mounts", {"storage.yaml": lambda text: text.replace(MOUNTS, "")})
    second.wait_applied(good, timeout=300)
    rbed.exec("gpu01", f"rm -rf /kept /pre {RECORD}")
    second.stop()
