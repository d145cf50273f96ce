"""Testbed accounting (issue 24, item 1): `testbed up --accounting` runs slurmdbd and MariaDB on ctl, registers
the cluster, enforces associations; the test users alice and bob submit jobs from ctl."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

import pytest

from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def bed(testbed_factory: Callable[..., Testbed]) -> Testbed:
    """A 2-node testbed with accounting (slurmdbd + MariaDB on ctl)."""
    return testbed_factory(nodes=2, accounting=True)


def _wait_state(bed: Testbed, job: str, want: set[str], timeout: float = 60) -> str:
    """Poll sacct until job JOB reaches one of the states WANT; return the last state seen."""
    state = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = bed.run("ctl", f"sacct -n -P -X -j {job} -o State").stdout.split()
        state = out[0] if out else ""
        if state in want:
            return state
        time.sleep(0.5)
    return state


def test_cluster_is_registered_and_root_runs_jobs(bed: Testbed) -> None:
    """The cluster is in slurmdbd with root's association; root runs jobs; slurmctld uses slurmdbd."""
    clusters = bed.run("ctl", "sacctmgr -n -P show cluster format=cluster", check=True).stdout.split()
    assert bed.name in clusters
    root = bed.run("ctl", "sacctmgr -n -P show assoc where user=root format=cluster,account,user", check=True)
    assert f"{bed.name}|root|root" in root.stdout.split()
    srun = bed.run("ctl", "srun -N1 hostname", check=True)
    assert srun.stdout.strip() in bed.computes
    conf = bed.run("ctl", "scontrol show config", check=True).stdout
    assert re.search(r"^AccountingStorageType\s*=\s*accounting_storage/slurmdbd$", conf, re.M), conf
    assert re.search(r"^AccountingStorageEnforce\s*=\s*associations,limits,qos$", conf, re.M), conf


def test_slurmdbd_conf_and_password(bed: Testbed) -> None:
    """slurmdbd.conf is 0600 slurm with the password of <state>/slurmdbd.pass, which logs in."""
    assert bed.run("ctl", "stat -c '%a %U' /etc/slurm/slurmdbd.conf", check=True).stdout.split() == ["600", "slurm"]
    conf = bed.run("ctl", "cat /etc/slurm/slurmdbd.conf", check=True).stdout
    password = (bed.state_dir / "slurmdbd.pass").read_text().strip()
    assert oct((bed.state_dir / "slurmdbd.pass").stat().st_mode & 0o777) == "0o600"
    assert f"StoragePass={password}\n" in conf and "StorageLoc=slurm_acct_db\n" in conf
    login = bed.run("ctl", f"mariadb -u slurm -p{password} -N -e 'select 1' slurm_acct_db", check=True)
    assert login.stdout.strip() == "1"
    for comm, user in (("mariadbd", "mysql"), ("slurmdbd", "slurm")):
        pids = bed.host_pids("ctl", comm)
        assert pids, comm
        assert bed.run("ctl", f"ps -o user= -C {comm}").stdout.split() == [user], comm


def test_test_users_exist_with_the_same_ids_everywhere(bed: Testbed) -> None:
    """alice and bob have the same uid/gid and a home directory on every node."""
    for node in bed.nodes:
        for user, uid in (("alice", 2001), ("bob", 2002)):
            out = bed.run(node, f"id -u {user}; id -g {user}; stat -c %u /home/{user}", check=True).stdout.split()
            assert out == [str(uid)] * 3, (node, user, out)


def test_user_with_association_runs_a_job_and_one_without_is_rejected(bed: Testbed) -> None:
    """alice (associated) runs a job as herself on a compute node; bob (none) is refused."""
    bed.run("ctl", "sacctmgr -i add account testacct", check=True)
    bed.run("ctl", "sacctmgr -i add user alice account=testacct", check=True)
    assoc = bed.run("ctl", "sacctmgr -n -P show assoc where user=alice format=account,user", check=True)
    assert assoc.stdout.split() == ["testacct|alice"]
    sub = bed.run("ctl", "su - alice -c \"sbatch --parsable -A testacct --wrap 'id -un; hostname'\"", check=True)
    job = sub.stdout.strip().split(";")[0]
    assert job.isdigit(), sub.stdout
    assert _wait_state(bed, job, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
    row = bed.run("ctl", f"sacct -n -P -X -j {job} -o User,Account,NodeList", check=True).stdout.split()
    user, account, node = row[0].split("|")
    assert (user, account) == ("alice", "testacct") and node in bed.computes
    out = bed.run(node, f"cat /home/alice/slurm-{job}.out", check=True).stdout.split()
    assert out == ["alice", node]  # ran as alice on the compute node

    bob = bed.run("ctl", "su - bob -c \"sbatch --wrap 'sleep 1'\"")
    assert bob.returncode != 0
    assert "Invalid account or account/partition combination specified" in bob.stderr, bob.stderr


def test_desired_state_says_what_the_running_slurm_conf_says(bed: Testbed) -> None:
    """cluster.yaml's slurm_conf is the running slurm.conf's parameters, in order."""
    loader = pytest.importorskip("reconciler.desired.loader")
    desired = [(k, str(v)) for k, v in loader.load_dir(bed.desired_state).state.cluster.slurm_conf.items()]
    running = bed.run("ctl", "cat /etc/slurm/slurm.conf", check=True).stdout.split("\n\n")[0].splitlines()
    pairs = [tuple(line.split("=", 1)) for line in running if "=" in line and not line.startswith("#")]
    assert pairs[2:] == desired  # after ClusterName and SlurmctldHost, in the same order
    for key, value in (("AccountingStorageType", "accounting_storage/slurmdbd"), ("AccountingStorageHost", "ctl"),
                       ("AccountingStorageEnforce", "associations,limits,qos"),
                       ("AccountingStorageTRES", "gres/gpu"), ("JobAcctGatherType", "jobacct_gather/linux")):
        assert (key, value) in desired


def test_job_over_maxwall_pends_and_deny_on_limit_rejects_it(bed: Testbed) -> None:
    """What Slurm 22.05 does with a job over the association's MaxWall: it stays pending with the reason
    AssocMaxWallDurationPerJobLimit; under a QOS with Flags=DenyOnLimit sbatch rejects it."""
    bed.run("ctl", "sacctmgr -i add account wallacct; sacctmgr -i add user alice account=wallacct")
    bed.run("ctl", "sacctmgr -i add qos denyqos Flags=DenyOnLimit", check=True)
    bed.run("ctl", "sacctmgr -i modify account wallacct set MaxWall=00:10:00 QOS+=denyqos", check=True)
    sub = bed.run("ctl", "su - alice -c \"sbatch --parsable -A wallacct -t 00:30:00 --wrap 'sleep 1'\"", check=True)
    job = sub.stdout.strip().split(";")[0]
    reason = ""
    for _ in range(40):  # the reason is set when the scheduler first looks at the job
        reason = bed.run("ctl", f"squeue -h -j {job} -o '%T %r'").stdout.strip()
        if reason and not reason.endswith(" None"):
            break
        time.sleep(0.25)
    assert reason == "PENDING AssocMaxWallDurationPerJobLimit"
    bed.run("ctl", f"scancel {job}", check=True)
    denied = bed.run("ctl", "su - alice -c \"sbatch -A wallacct -q denyqos -t 00:30:00 --wrap 'sleep 1'\"")
    assert denied.returncode == 1
    assert denied.stderr.splitlines() == [
        "sbatch: error: AssocMaxWallDurationPerJobLimit",
        "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's "
        "size and/or time limits)"]


def test_down_kills_the_database_daemons(bed: Testbed) -> None:
    """down kills mariadbd and slurmdbd and leaves no state directory."""
    pids = bed.host_pids("ctl", "mariadbd") + bed.host_pids("ctl", "slurmdbd")
    assert len(pids) == 2
    bed.down()
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]
    assert not bed.state_dir.exists()
