"""Accounting as code on the testbed: real slurmctld, slurmdbd and MariaDB, reached over real SSH (issue 24).

From an empty database: QOS, an account tree and users applied with sacctmgr, a second plan empty; jobs as
alice run in her account and a job over the account's MaxWall is refused by Slurm at submission with the limit named; a hand
edit is reported with its diff and healed by the daemon in enforce mode; removing bob while his job runs is
refused with the job id and applied once it ended; `reconciler import` reads the accounting database back
into a desired state whose first plan is a no-op.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonBed
from tests.daemon.harness import GitRemote
from tests.desired.secrets.conftest import FILES as SECRET_FILES
from tests.engine.conftest import Bed
from tests.testbed_fixture import SLURM_RELEASES, Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[3]

ACCOUNTING = """\
accounting:
  qos:
    - name: high
      priority: 100
      flags: [DenyOnLimit]
      limits: {MaxTRESPerUser: "gres/gpu=8"}
  accounts:
    - name: ml
      description: machine learning
      organization: research
      fairshare: 10
      qos: [high, normal]
      default_qos: high
      limits: {MaxWall: "00:10:00", GrpTRES: "gres/gpu=16"}
    - name: ml-vision
      parent: ml
      fairshare: 2
  users:
    - name: alice
      default_account: ml
      accounts: [ml-vision]
    - name: bob
      default_account: ml-vision
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The reconciler command line."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


@dataclass
class AcctBed:
    """The testbed with accounting, and the desired-state directory the tests edit."""

    testbed: Testbed
    desired: Path

    def sacctmgr(self, *args: str) -> str:
        """`sacctmgr -P -n ARGS` on ctl."""
        return self.testbed.run("ctl", "sacctmgr -P -n " + " ".join(args), check=True).stdout

    def assocs(self) -> set[str]:
        """`account|user|parent|share|qos|maxwall|grptres` of every association, sorted lines."""
        text = self.sacctmgr(f"show assoc cluster={self.testbed.name} WOPLimits "
                             "format=Account,User,ParentName,Share,QOS,MaxWall,GrpTRES")
        return {line for line in text.splitlines() if line.strip()}


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def abed(request: pytest.FixtureRequest, testbed_factory: Callable[..., Testbed],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[AcctBed]:
    """A running testbed (each Slurm release) with slurmdbd on MariaDB; its desired state applied once (so only
    accounting differs); it goes down after its release's tests."""
    testbed = testbed_factory(nodes=2, accounting=True, slurm=request.param)
    testbed.wait_idle()
    desired = tmp_path_factory.mktemp("acct") / "desired"
    shutil.copytree(testbed.desired_state, desired)
    applied = cli("apply", str(desired), "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    testbed.wait_idle()
    yield AcctBed(testbed, desired)
    testbed.down()


def test_01_from_an_empty_database_applied_then_the_second_plan_is_empty(abed: AcctBed) -> None:
    before = abed.assocs()
    assert not any(line.startswith("ml|") for line in before)  # empty: root only
    (abed.desired / "accounting.yaml").write_text(ACCOUNTING)
    plan = cli("plan", str(abed.desired))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    for line in ("create QOS high", "create account ml", "create account ml-vision", "create user alice",
                 "create user bob"):
        assert line in plan.stdout, plan.stdout
    assert abed.assocs() == before  # plan changed nothing
    applied = cli("apply", str(abed.desired), "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assocs = abed.assocs()
    assert "ml||root|10|high,normal|00:10:00|gres/gpu=16" in assocs, assocs
    assert "ml-vision||ml|2|||" in assocs, assocs
    assert {line.split("|")[0] for line in assocs if line.split("|")[1] == "alice"} == {"ml", "ml-vision"}
    assert {line.split("|")[0] for line in assocs if line.split("|")[1] == "bob"} == {"ml-vision"}
    assert abed.sacctmgr("show user alice format=User,DefaultAccount").strip() == "alice|ml"
    qos = abed.sacctmgr("show qos high format=Name,Priority,MaxTRESPU").strip()
    assert qos == "high|100|gres/gpu=8", qos
    again = cli("plan", str(abed.desired))
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr


def _job_state(testbed: Testbed, job: str) -> str:
    return testbed.run("ctl", f"scontrol show job {job} -o", check=True).stdout


def test_02_alice_runs_in_ml_and_a_job_over_maxwall_is_refused_with_the_limit_named(abed: AcctBed) -> None:
    ok = abed.testbed.run("ctl", "su alice -c \"sbatch --parsable -D /tmp -A ml -t 5 --wrap 'sleep 1'\"", check=True)
    job = ok.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while "JobState=COMPLETED" not in (state := _job_state(abed.testbed, job)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "JobState=COMPLETED" in state and " UserId=alice(" in state and " Account=ml " in state, state
    assert " QOS=high " in state, state  # the account's default QOS
    # ml's jobs run in QOS high, whose DenyOnLimit makes Slurm refuse at submission what would break a limit
    over = abed.testbed.run("ctl", "su alice -c \"sbatch --parsable -D /tmp -A ml -t 30 --wrap 'sleep 1'\"")
    assert over.returncode == 1, over.stdout + over.stderr
    assert "sbatch: error: AssocMaxWallDurationPerJobLimit" in over.stderr, over.stderr
    assert "Job violates accounting/QOS policy" in over.stderr, over.stderr


def test_03_a_hand_edit_is_reported_with_its_diff_and_healed_by_the_daemon_in_enforce_mode(
        abed: AcctBed, tmp_path: Path) -> None:
    abed.testbed.run("ctl", "sacctmgr -i modify account ml set fairshare=5", check=True)
    plan = cli("plan", str(abed.desired))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "update account ml: fairshare 5 -> 10" in plan.stdout, plan.stdout
    assert "-fairshare: 5" in plan.stdout and "+fairshare: 10" in plan.stdout, plan.stdout
    remote = GitRemote.create(tmp_path, abed.desired)
    daemons = DaemonBed(Bed(testbed=abed.testbed, desired=abed.desired), remote, tmp_path, itertools.count(1), [])
    daemon = daemons.daemon(drift_interval="2s")
    try:
        daemon.wait_applied(remote.head())
        daemon.wait_for("fairshare healed", lambda: "ml||root|10|" in "\n".join(abed.assocs()), timeout=90)
        abed.testbed.run("ctl", "sacctmgr -i modify account ml set fairshare=7", check=True)
        daemon.wait_for("second hand edit healed", lambda: "ml||root|10|" in "\n".join(abed.assocs()), timeout=60)
        drift = [e for e in daemon.events() if e.get("event") in ("drift.detected", "drift.found", "drift")]
        assert drift or "fairshare" in daemon.log_tail(400), daemon.log_tail(80)
    finally:
        daemon.stop()


def test_04_removing_bob_while_his_job_runs_is_refused_with_the_job_then_applied(abed: AcctBed) -> None:
    started = abed.testbed.run("ctl", "su bob -c \"sbatch --parsable -D /tmp -A ml-vision -t 5 --wrap 'sleep 300'\"",
                               check=True)
    job = started.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while "JobState=RUNNING" not in _job_state(abed.testbed, job) and time.monotonic() < deadline:
            time.sleep(0.5)
        text = (abed.desired / "accounting.yaml").read_text()
        (abed.desired / "accounting.yaml").write_text(
            text.replace("    - name: bob\n      default_account: ml-vision\n",
                         "    - name: bob\n      default_account: ml-vision\n      state: absent\n"))
        refused = cli("apply", str(abed.desired), "--yes")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"refused: remove user bob: pending or running jobs {job} (running, bob)" in refused.stdout \
            + refused.stderr
        assert "bob" in abed.sacctmgr("show user bob format=User")
    finally:
        abed.testbed.run("ctl", f"scancel {job}")
    deadline = time.monotonic() + 60
    while abed.testbed.run("ctl", f"squeue -h -j {job}").stdout.strip() and time.monotonic() < deadline:
        time.sleep(0.5)
    applied = cli("apply", str(abed.desired), "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert abed.sacctmgr("show user bob format=User").strip() == ""
    again = cli("plan", str(abed.desired))
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout


def test_05_import_reads_the_accounting_database_and_the_first_plan_is_a_no_op(abed: AcctBed,
                                                                                tmp_path: Path) -> None:
    out = tmp_path / "imported"
    result = cli("import", "ssh://ctl", "--out", str(out), "--ssh-config", str(abed.testbed.ssh_config),
                 "--known-hosts", str(abed.testbed.known_hosts))
    assert result.returncode == 0, result.stdout + result.stderr
    text = (out / "accounting.yaml").read_text()
    for fragment in ("name: high", "name: ml\n", "name: ml-vision", "parent: ml", "name: alice",
                     "default_account: ml", "MaxWall: 00:10:00", "gres/gpu=8", "default_qos: high",
                     "- DenyOnLimit"):
        assert fragment in text, text
    shutil.copy(abed.testbed.desired_state / "nodes.yaml", out / "nodes.yaml")
    # as the imported storage.yaml says: widen the mount's `nodes` to every node that mounts it (the apply of
    # the testbed's desired state mounted /shared on the compute nodes too)
    storage = out / "storage.yaml"
    storage.write_text(re.sub(r"(mountpoint: /shared\n(?:.*\n)*?\s*nodes: )ctl\b", r"\1ctl,gpu[01-02]",
                              storage.read_text()))
    assert "ctl,gpu[01-02]" in storage.read_text(), storage.read_text()
    plan = cli("plan", str(out), "--format", "json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert [c for c in json.loads(plan.stdout)["changes"] if c["action"] != "ok"] == []


SLURMDBD_FILES = SECRET_FILES.replace("nodes: login01", "nodes: ctl")  # slurmdbd.conf from secrets/*.age


def test_06_slurmdbd_conf_from_an_age_file_runs_and_its_password_is_shown_nowhere(
        abed: AcctBed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database password of the running slurmdbd, in Git only age-encrypted: the daemon decrypts it with
    its identity, writes slurmdbd.conf 0600 slurm and restarts slurmdbd, which runs with it; the password is
    in no plan, log, PR comment, database row, metrics or status page; a PR changing it says it changed."""
    import pyrage

    from tests.daemon.harness import git
    from tests.forge.fake_github import FakeGitHub

    password = (abed.testbed.state_dir / "slurmdbd.pass").read_text().strip()
    assert len(password) >= 8
    current = abed.testbed.run("ctl", "cat /etc/slurm/slurmdbd.conf", check=True).stdout
    assert password in current
    wanted = current.rstrip("\n") + "\nDebugLevel=verbose\n"
    identity = pyrage.x25519.Identity.generate()
    key = tmp_path / "age.key"
    key.write_text(f"# public key: {identity.to_public()}\n{identity}\n")
    key.chmod(0o600)
    (abed.desired / "secrets.yaml").write_text(f"secrets:\n  recipients: [{identity.to_public()}]\n")
    (abed.desired / "slurmdbd.yaml").write_text(SLURMDBD_FILES)
    plain = tmp_path / "slurmdbd.conf"
    plain.write_text(wanted)
    (abed.desired / "secrets").mkdir(exist_ok=True)
    made = cli("secret", "encrypt", str(abed.desired), str(plain), "-o",
               str(abed.desired / "secrets" / "slurmdbd.conf.age"))
    assert made.returncode == 0, made.stdout + made.stderr
    plain.unlink()
    outputs: list[str] = []
    plan = cli("plan", str(abed.desired), "--age-identity", str(key))
    outputs.append(plan.stdout + plan.stderr)
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "update /etc/slurm/slurmdbd.conf" in plan.stdout and "restarts slurmdbd on ctl" in plan.stdout, plan.stdout
    before = abed.testbed.run("ctl", "supervisorctl pid slurmdbd", check=True).stdout.strip()

    token = "ghp_accountingTestToken0123456789"
    monkeypatch.setenv("RECONCILER_TEST_FORGE_TOKEN", token)
    fake = FakeGitHub(token=token)
    (tmp_path / "git").mkdir()
    remote = GitRemote.create(tmp_path / "git", abed.desired)
    daemons = DaemonBed(Bed(testbed=abed.testbed, desired=abed.desired), remote, tmp_path, itertools.count(1), [])
    with fake.running():
        daemon = daemons.daemon(age_identity=str(key), drift_interval="3s",
                                forge={"type": "github", "url": fake.base_url, "repo": "acme/cluster",
                                       "token_env": "RECONCILER_TEST_FORGE_TOKEN", "interval": "1s"})
        try:
            daemon.wait_applied(remote.head(), timeout=180)
            stat = abed.testbed.run("ctl", "stat -c '%a %U %G' /etc/slurm/slurmdbd.conf", check=True).stdout.strip()
            assert stat == "600 slurm root"
            assert abed.testbed.run("ctl", "cat /etc/slurm/slurmdbd.conf", check=True).stdout == wanted
            daemon.wait_for("slurmdbd restarted and serving", lambda: abed.testbed.run(
                "ctl", "supervisorctl pid slurmdbd").stdout.strip() not in ("", "0", before)
                and abed.testbed.run("ctl", f"sacctmgr -n -P show cluster {abed.testbed.name} format=Cluster"
                                     ).stdout.strip() == abed.testbed.name, timeout=60)
            # a pull request changing the password: planned from ciphertexts only
            work = remote.work
            git(work, "checkout", "-q", "-B", "rotate", "main")
            (work / "secrets" / "slurmdbd.conf.age").write_bytes(
                pyrage.encrypt(wanted.replace(password, "n3w-" + password).encode(), [identity.to_public()]))
            git(work, "commit", "-qam", "rotate the slurmdbd password")
            git(work, "push", "-q", "--force", "origin", "HEAD:refs/pull/9/head")
            sha = git(work, "rev-parse", "HEAD")
            git(work, "checkout", "-q", "main")
            fake.add_pull(9, sha, head_ref="rotate")
            daemon.wait_for("PR comment", lambda: any(sha[:12] in c["body"] for c in fake.comments_on(9)), timeout=90)
            comment = fake.comments_on(9)[0]["body"]
            assert "secret changed in this pull request" in comment and "not decrypted here" in comment, comment
            outputs.append(comment)
            listen = json.loads(daemon.config.read_text())["metrics_listen"]
            for path in ("/", "/metrics"):
                with urllib.request.urlopen(f"http://{listen}{path}", timeout=10) as response:
                    outputs.append(response.read().decode())
        finally:
            daemon.stop()
    again = cli("plan", str(abed.desired), "--age-identity", str(key))
    outputs.append(again.stdout + again.stderr)
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr
    outputs.append(daemon.log_path.read_text())
    for db in sorted(daemon.state_dir.rglob("*.db")):  # every row of the daemon's databases
        conn = sqlite3.connect(str(db))
        outputs.append("\n".join(conn.iterdump()))
        conn.close()
    assert len(outputs) >= 7
    for text in outputs:
        assert password not in text
    assert token not in daemon.log_path.read_text()
