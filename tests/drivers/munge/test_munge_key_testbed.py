"""Munge key rotation on a running testbed (issue 14): through the CLI, through the daemon, a drifted node,
and a node whose munge fails to restart; the key is grepped for everywhere it must not be."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.desired.loader import load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.munge_key import KEY_PATH
from reconciler.engine.run import open_reconcile
from reconciler.forge.pr_comment import render_pr_comment
from reconciler.forge.pr_planning import PrPlan
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[3]
NODES = ["ctl", "gpu01", "gpu02"]
CHECK = '    - name: munge-cross\n      nodes: "ctl,gpu[01-02]"\n      munge: true\n'


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The reconciler CLI of this checkout."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def forms(key: bytes) -> list[str]:
    """The key as bytes would show in text: base64, hex, raw (latin-1), and the tail of its sha256."""
    b64 = base64.b64encode(key).decode()
    return [b64, b64[:24], key.hex()[:32], key.decode("latin-1")[:24], hashlib.sha256(key).hexdigest()[16:]]


def assert_absent(key: bytes, where: str, text: str | bytes) -> None:
    """No spelling of KEY in TEXT."""
    data = text.encode("latin-1", "replace") if isinstance(text, str) else text
    for form in forms(key):
        assert form.encode("latin-1") not in data, f"the munge key shows in {where}"


def key_facts(bed: Testbed) -> dict[str, str]:
    """Each node's key: sha256, mode, owner, group; and what else lies in /etc/munge."""
    out = {}
    for node in NODES:
        out[node] = bed.run(node, f"sha256sum {KEY_PATH} | cut -d' ' -f1; stat -c '%a %U %G' {KEY_PATH}; "
                                  "ls -A /etc/munge | tr '\\n' ' '", check=True).stdout
    return out


def expect_key(bed: Testbed, key: bytes, gone: list[bytes]) -> None:
    """Every node holds KEY, 0400 munge:munge, and no file in /etc/munge holds an old key."""
    digest = hashlib.sha256(key).hexdigest()
    for node, text in key_facts(bed).items():
        assert text.split("\n")[:3] == [digest, "400 munge munge", "munge.key "], (node, text)
        sums = bed.run(node, "find /etc/munge -type f -exec sha256sum {} +", check=True).stdout
        for old in gone:
            assert hashlib.sha256(old).hexdigest() not in sums, f"an old key is still on {node}"


def srun_works(bed: Testbed) -> None:
    """`srun -N2 hostname` on ctl runs on both compute nodes."""
    bed.wait_idle(90)
    proc = bed.run("ctl", "timeout 60 srun -N2 hostname", check=True)
    assert sorted(proc.stdout.split()) == ["gpu01", "gpu02"]


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A 2-node testbed with Slurm running."""
    return testbed_factory(nodes=2)


def test_munge_key_rotation(bed: Testbed, tmp_path: Path) -> None:
    old_sha = bed.run("ctl", f"sha256sum {KEY_PATH}", check=True).stdout.split()[0]
    desired = tmp_path / "desired"
    shutil.copytree(bed.desired_state, desired)
    with open(desired / "checks.yaml", "a") as fh:
        fh.write(CHECK)
    first = cli("apply", str(desired), "--yes")  # the testbed's own state first: only munge changes after
    assert first.returncode == 0, first.stdout + first.stderr
    assert cli("plan", str(desired)).returncode == 0
    assert cli("check", str(desired), "munge-cross", "--no-act").returncode == 0

    # 1. a new key from a file on the login node: plan shows a fingerprint, apply rotates in order
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    key1 = os.urandom(128)
    (keys / "munge.key").write_bytes(key1)
    (desired / "munge.yaml").write_text(f"munge:\n  key_file: {keys / 'munge.key'}\n")
    texts = {fmt: cli("plan", str(desired), "--format", fmt) for fmt in ("text", "json", "markdown")}
    per_node = cli("plan", str(desired), "--format", "json", "--per-node")
    for fmt, proc in [*texts.items(), ("json --per-node", per_node)]:
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert_absent(key1, f"plan --format {fmt}", proc.stdout + proc.stderr)
    fp = f"sha256:{hashlib.sha256(key1).hexdigest()[:16]}"
    assert f"update {KEY_PATH} (munge key sha256:{old_sha[:16]} -> {fp})" in texts["text"].stdout
    plan = json.loads(texts["json"].stdout)
    assert [(f["kind"], f["target"], f["node"]) for f in plan["followups"]] == [
        ("restart", "munge", "ctl"), ("restart", "munge", "gpu01"), ("restart", "munge", "gpu02"),
        ("restart", "slurmctld", "ctl"), ("restart", "slurmd", "gpu01"), ("restart", "slurmd", "gpu02")]

    # the PR comment for this change (planned in-process against the live facts)
    run = open_reconcile(load_dir(desired), all_drivers())
    try:
        run.gather()
        live = run.plan()
    finally:
        run.close()
    comment = render_pr_comment(PrPlan(number=7, head_sha="c" * 40, head_ref="rotate", subdir="", status="ok",
                                       main_plan=live, plan=live))
    assert fp in comment
    assert_absent(key1, "the PR comment", comment)

    applied = cli("apply", str(desired), "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert_absent(key1, "apply output", applied.stdout + applied.stderr)
    steps = [line.strip() for line in applied.stdout.splitlines() if line.strip().startswith(("ctl:", "gpu0"))]
    order = [s for s in steps if s.endswith(("restart munge", "restart slurmctld", "restart slurmd"))]
    assert [s.split(": ", 1)[1] for s in order] == ["restart munge"] * 3 + ["restart slurmctld"] + ["restart slurmd"] * 2
    expect_key(bed, key1, [])
    assert all(old_sha not in bed.run(n, f"sha256sum {KEY_PATH}").stdout for n in NODES)
    srun_works(bed)
    again = cli("plan", str(desired))
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr
    assert cli("check", str(desired), "munge-cross", "--no-act").returncode == 0

    # 2. the daemon rotates to a key from the environment; its log and state.db never hold it
    key2 = os.urandom(256)
    (desired / "munge.yaml").write_text("munge:\n  key_env: MUNGE_KEY_B64\n")
    state = tmp_path / "daemon-state"
    daemon = cli("run", "--watch", str(desired), "--once", "--mode", "enforce", "--state-dir", str(state),
                 "--metrics-listen", "off", env={"MUNGE_KEY_B64": base64.b64encode(key2).decode()}, timeout=400)
    assert daemon.returncode == 0, daemon.stdout[-3000:] + daemon.stderr[-3000:]
    assert f"sha256:{hashlib.sha256(key2).hexdigest()[:16]}" in daemon.stdout + daemon.stderr
    for key in (key1, key2):
        assert_absent(key, "the daemon's log", daemon.stdout + daemon.stderr)
        for db in state.glob("state.db*"):
            assert_absent(key, db.name, db.read_bytes())
    expect_key(bed, key2, [key1])
    srun_works(bed)

    # 3. a node whose key drifted fails the cross-node check; apply restarts munge and slurmd there only
    bed.run("gpu02", f"head -c 128 /dev/urandom > {KEY_PATH} && supervisorctl restart munge", check=True)
    check = cli("check", str(desired), "munge-cross", "--no-act")
    assert check.returncode == 2, check.stdout + check.stderr
    assert "FAIL  node munge-cross gpu02: munge: credential from ctl not decoded on gpu02" in check.stdout
    assert "PASS  node munge-cross gpu01" in check.stdout
    env = {"MUNGE_KEY_B64": base64.b64encode(key2).decode()}
    healed = cli("apply", str(desired), "--yes", env=env)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    restarts = [line.strip() for line in healed.stdout.splitlines() if " restart " in f" {line.strip()}"]
    assert restarts == ["gpu02: restart munge", "gpu02: restart slurmd"], healed.stdout
    assert cli("check", str(desired), "munge-cross", "--no-act", env=env).returncode == 0
    srun_works(bed)

    # 4. munge fails to restart on gpu02: its slurmd is left alone, gpu01 goes on; fixed, the next apply converges
    key3 = os.urandom(128)
    (keys / "munge.key").write_bytes(key3)
    (desired / "munge.yaml").write_text(f"munge:\n  key_file: {keys / 'munge.key'}\n")
    slurmd_before = {n: bed.host_pids(n, "slurmd") for n in ("gpu01", "gpu02")}
    bed.run("gpu02", "mv /usr/sbin/munged /usr/sbin/munged.off", check=True)
    try:
        broken = cli("apply", str(desired), "--yes")
    finally:
        bed.run("gpu02", "mv /usr/sbin/munged.off /usr/sbin/munged", check=True)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "gpu02" in broken.stdout and "restart munge" in broken.stdout
    steps = [line.strip() for line in broken.stdout.splitlines()]
    assert "gpu02: restart slurmd" not in steps and "gpu01: restart slurmd" in steps, broken.stdout
    # not run, and not forgotten either: owed on the node for the next apply (docs/consequences.md, "Owed follow-ups")
    assert any(s.startswith("gpu02: restart slurmd is owed") for s in steps), broken.stdout
    assert bed.host_pids("gpu02", "slurmd") == slurmd_before["gpu02"]
    assert bed.host_pids("gpu01", "slurmd") != slurmd_before["gpu01"]
    fixed = cli("apply", str(desired), "--yes")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "gpu02: start munge" in fixed.stdout
    expect_key(bed, key3, [key1, key2])
    srun_works(bed)
    assert cli("plan", str(desired)).returncode == 0
    assert cli("check", str(desired), "munge-cross", "--no-act").returncode == 0
