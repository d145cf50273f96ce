"""An age-encrypted `source:` on the testbed, over real SSH: apply writes it (0600), a second plan is a no-op, an
edit is applied by the daemon, and the plaintext shows in no plan, log or state database."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.desired.secrets.conftest import Key, make_key
from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[3]
TARGET = "/etc/reconciler-test/db.conf"
FIRST = "StoragePass=age-SENTINEL-first-5b1e\n"
SECOND = "StoragePass=age-SENTINEL-second-93c0\n"


@dataclass
class Site:
    """The testbed, a desired-state copy with an .age source, and the login node's identity."""

    bed: Testbed
    desired: Path
    key: Key
    work: Path

    def cli(self, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        """The reconciler CLI of this checkout."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                              timeout=300, cwd=REPO, input=stdin,
                              env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})

    def with_key(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A command on the desired state, with the identity in RECONCILER_AGE_IDENTITY."""
        return self.cli(*args, str(self.desired), env={"RECONCILER_AGE_IDENTITY": str(self.key.identity)})

    def sh(self, node: str, command: str) -> str:
        """Run a command inside a node; its stdout."""
        return self.bed.run(node, command, check=True, timeout=120).stdout


@pytest.fixture(scope="module")
def site(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Site:
    bed = testbed_factory(nodes=2, bare=False)
    work = tmp_path_factory.mktemp("age")
    desired = work / "desired"
    shutil.copytree(bed.desired_state, desired)
    key = make_key(work / "keys")
    (desired / "age-secrets.yaml").write_text(
        f"secrets:\n  recipients: [{key.recipient}]\n"
        f"files:\n  - {{path: {TARGET}, nodes: gpu01, source: secrets/db.conf.age, mode: \"0600\"}}\n")
    (desired / "secrets").mkdir()
    site = Site(bed, desired, key, work)
    made = site.cli("secret", "encrypt", str(desired), "-", "-o", str(desired / "secrets" / "db.conf.age"),
                    stdin=FIRST)
    assert made.returncode == 0, made.stderr
    return site


def assert_hidden(*outputs: str | bytes) -> None:
    """Neither plaintext in any output."""
    for output in outputs:
        data = output.encode() if isinstance(output, str) else output
        assert b"SENTINEL" not in data


def test_01_apply_writes_the_decrypted_file_and_a_second_plan_is_clean(site: Site) -> None:
    shown = [site.with_key("plan"), site.with_key("plan", "--format", "json", "--per-node"),
             site.with_key("plan", "--format", "markdown")]
    assert [p.returncode for p in shown] == [2, 2, 2], [p.stdout + p.stderr for p in shown]
    assert "<secret sha256:" in shown[0].stdout and f"create {TARGET} (secret)" in shown[0].stdout
    changes = [c for c in json.loads(shown[1].stdout)["changes"] if c["resource"] == TARGET]
    assert [c["node"] for c in changes] == ["gpu01"]
    applied = site.with_key("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert site.sh("gpu01", f"cat {TARGET}") == FIRST
    assert site.sh("gpu01", f"stat -c '%a %U' {TARGET}").split() == ["600", "root"]
    again = site.with_key("plan")
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr
    assert_hidden(*(p.stdout + p.stderr for p in [*shown, applied, again]))


def test_02_wrong_identity_or_none_changes_nothing(site: Site) -> None:
    other = make_key(site.work / "other")
    before = site.sh("gpu01", f"sha256sum {TARGET}")
    wrong = site.cli("apply", str(site.desired), "--yes", "--age-identity", str(other.identity))
    assert wrong.returncode == 1 and "age-secrets.yaml:4:" in wrong.stderr and "cannot decrypt" in wrong.stderr
    none = site.cli("apply", str(site.desired), "--yes", env={"RECONCILER_AGE_IDENTITY": ""})
    assert none.returncode == 1 and "no age identity" in none.stderr
    plan = site.cli("plan", str(site.desired), env={"RECONCILER_AGE_IDENTITY": ""})
    assert plan.returncode == 1 and "not decrypted, cannot compare" in plan.stdout
    assert site.sh("gpu01", f"sha256sum {TARGET}") == before
    assert_hidden(*(p.stdout + p.stderr for p in (wrong, none, plan)))


def test_03_an_edit_is_applied_by_the_daemon_and_never_logged(site: Site) -> None:
    script = site.work / "editor.py"
    script.write_text(f"import sys\nopen(sys.argv[1], 'w').write({SECOND!r})\n")
    edited = site.cli("secret", "edit", str(site.desired), str(site.desired / "secrets" / "db.conf.age"),
                      env={"EDITOR": f"{sys.executable} {script}", "RECONCILER_AGE_IDENTITY": str(site.key.identity)})
    assert edited.returncode == 0, edited.stderr
    state = site.work / "daemon-state"
    config = site.work / "config.yaml"
    config.write_text(f"watch: {site.desired}\nmode: enforce\nstate_dir: {state}\nmetrics_listen: null\n"
                      f"log_format: json\nage_identity: {site.key.identity.relative_to(site.work)}\n"
                      "checks_after_apply: false\n")
    run = site.cli("run", "--config", str(config), "--once")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert site.sh("gpu01", f"cat {TARGET}") == SECOND
    assert site.with_key("plan").returncode == 0
    assert_hidden(run.stdout, run.stderr, edited.stdout, edited.stderr,
                  *(p.read_bytes() for p in state.rglob("*") if p.is_file()))
