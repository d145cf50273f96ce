"""A rollback that fails is reported as failed, and an ended upgrade shows the present state (issue 43, items 4 and
5), on the testbed: a real `reconciler run` daemon over real SSH, real Slurm 22.05, real apt/dpkg, a real SQLite
journal, its metrics and status page on a real listener, notifications to a local webhook; the driver packages,
`modprobe` and nvidia-smi are the testbed's STAND-INS.

Two nodes move 550 -> 570 with a driver reload in two waves (canary gpu01, then gpu02), failure budget 0: gpu01 gets
the good 570 and passes, gpu02 the BROKEN 570 (XID 79 once loaded) and fails its gate, so both are rolled back. The daemon is paused
(failpoint `upgrade.done=stop`) once gpu01 passed, and gpu01's package downloads are broken (apt's cache emptied, a
proxy that refuses): the undo of gpu01 (the downgrade to 550) fails. The rollout must say `rollback-failed` and name
gpu01 and what failed, everywhere. Then a human repairs gpu01 and resumes both nodes: the status and
reconciler_node_upgrade_state must stop saying failed (the alert ReconcilerUpgradeNodeFailed reads the metric), while
the rollout's history keeps what happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import urllib.request
from collections.abc import Callable
from functools import cmp_to_key
from pathlib import Path

import pytest

from reconciler.common.versions import deb_compare
from reconciler.forge.rolled_back import banner
from tests.daemon.harness import DaemonProcess, GitRemote, write_config
from tests.rollout.conftest import Webhook, journal
from tests.rollout.upgrade_bed import DRIVER, FM, cli, field, package_bed, pair, poll
from tests.testbed_fixture import Testbed
from tests.transport.sshd_server import free_port

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(600)]
NODES = ["gpu01", "gpu02"]
UPGRADE = """rollout:
  waves: progressive
  canary: 1
  steps: ["100%"]
  soak: 1s
  gates: {node_checks: false, smoke_job: false}
  upgrade:
    max_unavailable: 1
    failure_budget: 0
    drain_timeout: 2m
    reboot_timeout: 2m
    driver_package: nvidia-driver-standin
    gates: [gpu]
    driver_reload: {modules: [nvidia_drm_standin, nvidia_standin]}
"""
RELOAD = "modprobe nvidia_standin && modprobe -r nvidia_standin && modprobe nvidia_standin"
SMI = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
PROXY = "/etc/apt/apt.conf.d/99-broken-proxy"


def packages(versions: dict[str, str]) -> str:
    """packages.yaml: the driver pair at a version per node, each change needing a driver reload."""
    out = "packages:\n"
    for node, version in versions.items():
        out += (f'  - nodes: "{node}"\n    packages:\n'
                f'      {DRIVER}: {{version: "{version}", needs: driver-reload}}\n      {FM}: "{version}"\n')
    return out


def stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP: state T in /proc)."""
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] == "T"


def scrape(port: int, path: str) -> str:
    """GET PATH from the daemon's listener."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:  # noqa: S310 - local
        return str(answer.read().decode())


def upgrade_series(metrics: str) -> set[str]:
    """The reconciler_node_upgrade_state series at 1, as `node=state`."""
    out = set()
    for line in metrics.splitlines():
        if line.startswith("reconciler_node_upgrade_state{") and line.endswith(" 1.0"):
            out.add(f"{field_of(line, 'node')}={field_of(line, 'state')}")
    return out


def field_of(line: str, label: str) -> str:
    """One label's value of a Prometheus text line."""
    return line.split(f'{label}="', 1)[1].split('"', 1)[0]


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """2 compute nodes, Slurm, the package repository."""
    return package_bed(testbed_factory, 2)


def test_failed_rollback_is_reported_and_a_repaired_node_no_longer_shows_failed(bed: Testbed, tmp_path: Path) -> None:
    desired = tmp_path / "desired"
    shutil.copytree(bed.desired_state, desired)
    manifest = bed.package_manifest["deb"]
    versions = sorted(manifest["standin"][DRIVER], key=cmp_to_key(deb_compare))
    old, new, broken = versions[0], versions[-1], manifest["standin_broken"][DRIVER]
    (desired / "packages.yaml").write_text(pair(old, "gpu[01-02]"))
    first = cli("apply", "--yes", str(desired))
    assert first.returncode == 0, first.stdout + first.stderr
    for node in NODES:  # the old driver loaded, as after a boot with it installed
        bed.run(node, RELOAD, check=True)
    # the daemon's first commit: the same versions, each change needing a reload, upgraded node by node
    (desired / "packages.yaml").write_text(packages(dict.fromkeys(NODES, old)))
    (desired / "rollout.yaml").write_text(UPGRADE)
    remote = GitRemote.create(tmp_path, desired)
    webhook = Webhook()
    port = free_port()
    state_dir = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", repository={"url": str(remote.bare), "branch": "main"},
                          mode="enforce", poll_interval="1s", drift_interval="2s", state_dir=str(state_dir),
                          metrics_listen=f"127.0.0.1:{port}", log_format="json",
                          retry={"initial": "2s", "max": "10s"}, checks_after_apply=False,
                          notifications={"targets": [{"url": webhook.url}], "rate_limit": "1s"})
    daemon = DaemonProcess(config=config, state_dir=state_dir, log_path=tmp_path / "daemon.log",
                           env={"RECONCILER_FAILPOINTS": "upgrade.done=stop"}).start()
    assert daemon.proc is not None
    try:
        daemon.wait_applied(remote.head(), timeout=180)
        target = remote.commit("driver 570: gpu01 the good one, gpu02 the broken one",
                               {"packages.yaml": lambda _: packages({"gpu01": new, "gpu02": broken})})
        # gpu01 passed (reloaded, gated, resumed): the daemon stops itself there; its downloads then break
        pid = daemon.proc.pid
        daemon.wait_for("the daemon paused after gpu01 passed", lambda: stopped(pid), 300)
        assert (((journal(state_dir) or {}).get("upgrade") or {}).get("nodes") or {})["gpu01"]["state"] == "done"
        bed.run("gpu01", f"apt-get clean && echo 'Acquire::http::Proxy \"http://127.0.0.1:9/\";' > {PROXY}",
                check=True)
        os.kill(pid, signal.SIGCONT)
        # the rollout's record is written first, the commit's rolled-back mark a moment later (then the run's end)
        status = daemon.wait_for("the rollout's end", lambda: (s := daemon.status()).get("last_rollout")
                                 and s["last_rollout"]["commit"] == target and target in s["rolled_back"] and s, 400)

        # --- item 4: rollback-failed, naming gpu01 and what failed, everywhere
        last = status["last_rollout"]
        assert last["status"] == "rollback-failed", last
        errors = last["rollback"]["errors"]
        assert len(errors) == 1 and errors[0].startswith("gpu01: rollback failed: undo: "), errors
        assert "127.0.0.1:9" in errors[0] or "Failed to fetch" in errors[0], errors
        assert status["upgrade"]["nodes"]["gpu01"]["state"] == "rollback-failed", status["upgrade"]
        assert status["upgrade"]["nodes"]["gpu02"]["state"] == "rolled-back", status["upgrade"]
        why = status["rolled_back"][target]
        assert why["status"] == "rollback-failed" and why["errors"] == errors, why
        # the run's end from the journal: a drift check (every 2 s here) may already have replaced status's last_run
        daemon.wait_for("the failed run's end", lambda: any(
            "rollback failed: gpu01: " in (e.get("error") or "") for e in daemon.runs_ended()
            if e.get("outcome") == "failed"), 30)
        text = cli("status", "--state-dir", str(state_dir)).stdout
        assert f"last rollout:   {target[:12]} rollback-failed: " in text, text
        assert "FAILED: gpu01: rollback failed: undo: " in text and "rolled back gpu[01-02]" not in text, text
        assert "[rollback FAILED: gpu01: rollback failed: undo: " in text, text
        assert "rollback-failed: gpu01 (rollback failed: undo: " in text, text
        assert "gpu01: left drained for a human: rollback failed: undo: " in text, text
        page = scrape(port, "/")
        assert "rollback-failed" in page and "rollback FAILED: gpu01: rollback failed: undo: " in page
        assert "gpu01=rollback-failed" in upgrade_series(scrape(port, "/metrics"))
        told = poll("the rolled-back notification", lambda: webhook.titled("rollback FAILED"), 30)
        assert "Rollback errors: gpu01: rollback failed: undo: " in told[0]["message"], told
        note = banner(target, why)
        assert "Rollback INCOMPLETE" in note and "**Rollback failed**: gpu01: rollback failed: undo: " in note, note
        # Slurm: gpu01 kept drained, the reason naming the failed rollback; gpu02 back on 550, drained for a human
        line = bed.run("ctl", "scontrol show node -o gpu01", check=True).stdout
        assert "DRAIN" in field(line, "State") and "rollback failed: undo" in field(line, "Reason"), line
        installed = bed.run("gpu02", f"dpkg-query -W -f='${{Version}}' {DRIVER}", check=True).stdout
        assert installed == old, installed

        # --- item 5: a human repairs gpu01 and resumes both: the present state is shown, the history kept
        bed.run("gpu01", f"rm -f {PROXY} && DEBIAN_FRONTEND=noninteractive apt-get -y -q install "
                         f"--allow-downgrades {DRIVER}={old} {FM}={old} >/dev/null && {RELOAD}", check=True)
        bed.run("ctl", "scontrol update nodename=gpu[01-02] state=resume", check=True)

        def released() -> dict[str, str] | None:
            states = {n: e["state"] for n, e in (daemon.status().get("upgrade") or {}).get("nodes", {}).items()}
            return states if states == dict.fromkeys(NODES, "released") else None
        daemon.wait_for("both nodes released in the status", released, 120)
        status = daemon.status()
        for node, was in (("gpu01", "was rollback-failed: rollback failed: undo: "), ("gpu02", "was rolled-back: ")):
            reason = status["upgrade"]["nodes"][node]["reason"]
            assert reason.startswith(f"no longer drained; {was}"), (node, reason)
        assert status["last_rollout"]["status"] == "rollback-failed"  # the history stays
        series = upgrade_series(scrape(port, "/metrics"))
        assert series == {"gpu01=released", "gpu02=released"}, series
        text = cli("status", "--state-dir", str(state_dir)).stdout
        assert "2 released" in text and "released: gpu01 (no longer drained; was rollback-failed" in text, text
        assert "rollback-failed: gpu01" not in text, text
    finally:
        daemon.kill()
        webhook.server.shutdown()
        bed.run("gpu01", f"rm -f {PROXY}")
