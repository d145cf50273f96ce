"""Two daemons on one testbed (issue 25): one leads through a lease on ctl, the other stands by; kill -9, a paused
leader fenced by the nodes, both restarted at once with PR comments. Real sshd, Slurm, Git and flock; the two
'login nodes' are two daemon processes with their own state directories on the host."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import DaemonBed
from tests.daemon.harness import REPO, DaemonProcess, git
from tests.daemon.test_daemon_testbed import add_partition, partitions

pytestmark = pytest.mark.timeout(600)

LEASE_DEFAULTS = {"lease_duration": "15s", "renew_interval": "5s"}  # the shipped defaults, spelled out


def ha(name: str, tag: str, peer: DaemonProcess | None = None, **extra: Any) -> dict[str, Any]:
    """An `ha:` section: lease and fence directories of their own per test (epochs from other tests stay apart)."""
    return {"name": name, "lease_dir": f"/var/lib/reconciler/ha-{tag}", "fence_dir": f"/var/lib/reconciler/fence-{tag}",
            **LEASE_DEFAULTS, **extra}


def role(daemon: DaemonProcess) -> dict[str, Any]:
    """The `ha` part of `reconciler status --format json` ({} before the first lease round)."""
    return dict(daemon.status().get("ha") or {})


def leads(daemon: DaemonProcess) -> bool:
    return role(daemon).get("role") == "leader"


def listen(daemon: DaemonProcess) -> str:
    return str(json.loads(daemon.config.read_text())["metrics_listen"])


def scrape(daemon: DaemonProcess) -> str:
    with urllib.request.urlopen(f"http://{listen(daemon)}/metrics", timeout=10) as response:
        return response.read().decode()


def proc_state(daemon: DaemonProcess) -> str:
    assert daemon.proc is not None
    return Path(f"/proc/{daemon.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def in_sync(dbed: DaemonBed) -> None:
    """Bring the cluster to the remote's head with a plain one-shot daemon (no ha): later tests start from it."""
    daemon = dbed.daemon()
    try:
        daemon.wait_applied(dbed.remote.head(), timeout=240)
    finally:
        daemon.stop()


def start_pair(dbed: DaemonBed, tag: str, first_env: dict[str, str] | None = None,
               **config: Any) -> tuple[DaemonProcess, DaemonProcess]:
    """login1 first (it takes the lease), then login2 (standby), each naming the other as its peer."""
    from tests.transport.sshd_server import free_port

    ports = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    one = dbed.daemon(env=first_env, metrics_listen=ports[0], **config,
                      ha=ha("login1", tag, peers=[{"name": "login2", "url": f"http://{ports[1]}"}]))
    one.wait_for("login1 leads", lambda: leads(one), timeout=120)
    two = dbed.daemon(metrics_listen=ports[1], **config,
                      ha=ha("login2", tag, peers=[{"name": "login1", "url": f"http://{ports[0]}"}]))
    two.wait_for("login2 stands by", lambda: role(two).get("role") == "standby" and role(two).get("leader") == "login1",
                 timeout=120)
    return one, two


def events(daemon: DaemonProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in daemon.events() if e.get("event") == name]


def wait(what: str, predicate: Callable[[], Any], timeout: float, daemons: list[DaemonProcess],
         dbed: DaemonBed | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    tails = "\n\n".join(f"--- {d.log_path.name}\n{d.log_tail(25)}" for d in daemons)
    nodes = dbed.bed.exec("ctl", "scontrol -o show node", check=False).stdout if dbed else ""
    raise AssertionError(f"timed out waiting for {what}\n{nodes}\n{tails}")


def test_kill_9_of_the_leader_the_standby_applies_the_next_commit(dbed: DaemonBed) -> None:
    """The leader dies; the standby takes the lease when it runs out and applies a commit pushed right after the
    kill, within lease_duration + renew_interval + the apply (target <= 30 s with the default lease)."""
    in_sync(dbed)
    one, two = start_pair(dbed, "kill9")
    try:
        assert not leads(two)
        assert re.search(r'^reconciler_leader\{node="login1"\} 1\.0$', scrape(one), re.M)
        assert re.search(r'^reconciler_leader\{node="login2"\} 0\.0$', scrape(two), re.M)
        status = subprocess.run([sys.executable, "-m", "reconciler.cli", "status", "--state-dir", str(two.state_dir)],
                                cwd=REPO, capture_output=True, text=True, timeout=60)
        assert "role:           standby: login2; leader login1 (epoch 1" in status.stdout, status.stdout
        # both histories from either daemon, marked by daemon
        two.wait_for("a standby run", lambda: two.status()["last_run"])
        history = subprocess.run([sys.executable, "-m", "reconciler.cli", "history", "--config", str(two.config),
                                  "--format", "json"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert history.returncode == 0, history.stderr
        runs = json.loads(history.stdout)
        assert {r["daemon"] for r in runs} == {"login1", "login2"}
        assert {r["mode"] for r in runs if r["daemon"] == "login2"} == {"report"}
        assert "enforce" in {r["mode"] for r in runs if r["daemon"] == "login1"}
        with urllib.request.urlopen(f"http://{listen(two)}/", timeout=10) as response:
            page = response.read().decode()
        assert "standby: login2; leader login1 (epoch 1" in page and "enforce (standby: report only)" in page
        assert re.search(r"<td>login1</td>", page) and re.search(r"<td>login2</td>", page)

        # a one-shot run on a third login node follows the lease too: it plans, it does not act
        once_dir = dbed.root / "once-kill9"
        once_config = dbed.root / "once-kill9.yaml"
        once_config.write_text(json.dumps({**json.loads(two.config.read_text()), "state_dir": str(once_dir),
                                           "metrics_listen": None, "ha": ha("login3", "kill9")}))
        once = subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--config", str(once_config), "--once"],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert once.returncode in (0, 2), once.stderr[-2000:]
        once_status = json.loads(subprocess.run(
            [sys.executable, "-m", "reconciler.cli", "status", "--state-dir", str(once_dir), "--format", "json"],
            cwd=REPO, capture_output=True, text=True, timeout=60).stdout)
        assert once_status["last_run"]["mode"] == "report" and once_status["ha"]["leader"] == "login1"
        assert leads(one)

        one.kill()
        killed = time.time()
        head = dbed.remote.commit("add partition failover", add_partition("failover"))
        two.wait_for("failover partition in sinfo", lambda: "failover" in partitions(dbed), timeout=60)
        two.wait_applied(head, timeout=30)
        took_over = two.wait_for("ha.took_over", lambda: events(two, "ha.took_over"), timeout=30)[0]
        takeover = DaemonProcess.event_time(took_over) - killed
        applied = next(r["ended"] for r in two.runs(head) if r["outcome"] == "applied") - killed
        print(f"\nkill -9 of the leader -> standby leads after {takeover:.1f}s, commit applied by it after "
              f"{applied:.1f}s (lease 15s, renew 5s, poll 1s)")
        # The lease runs out at most 15 s after the kill (its last renewal was before it), and the standby sees that
        # at its next renewal, at most 5 s later; 8 s more for the lease command and a report run of the standby
        # that may be in flight (the loop takes over between runs) on a loaded machine. The apply after it is the
        # run's own work (bounded by the waits above).
        assert takeover <= 15 + 5 + 8, takeover
        now = role(two)
        assert now["role"] == "leader" and now["epoch"] == 2
        status = subprocess.run([sys.executable, "-m", "reconciler.cli", "status", "--state-dir", str(two.state_dir)],
                                cwd=REPO, capture_output=True, text=True, timeout=60)
        assert "role:           leader: login2 (epoch 2" in status.stdout, status.stdout
        assert re.search(r'^reconciler_leader\{node="login2"\} 1\.0$', scrape(two), re.M)
        took = events(two, "ha.took_over")
        assert took and took[0]["previous"] == "login1" and took[0]["previous_epoch"] == 1
        leases = dbed.bed.exec("ctl", "cat /var/lib/reconciler/ha-kill9/leases.log").stdout.splitlines()
        assert [(json.loads(x)["event"], json.loads(x)["epoch"], json.loads(x)["holder"]) for x in leases] == [
            ("acquired", 1, "login1"), ("acquired", 2, "login2")]
    finally:
        two.stop()
        one.kill()


def test_paused_leader_is_fenced_by_the_nodes_and_steps_down(dbed: DaemonBed) -> None:
    """login1 stops itself (SIGSTOP, a failpoint) right before its first file write of a commit; login2 takes over
    and applies that commit and a newer one; SIGCONT: login1's pending write is refused by the nodes, it steps
    down, and no file was written by both (the nodes' write journals show epoch 2 only)."""
    in_sync(dbed)
    tag = "pause"
    one, two = start_pair(dbed, tag, first_env={"RECONCILER_FAILPOINTS": "fence.before-write=stop"})
    daemons = [one, two]
    try:
        dbed.remote.commit("add partition paused", add_partition("paused"))
        wait("login1 stopped before its write", lambda: proc_state(one) == "T", 60, daemons)
        stopped = time.monotonic()
        two.wait_for("login2 leads", lambda: leads(two), timeout=40)
        took_over = time.monotonic() - stopped
        two.wait_for("paused partition", lambda: "paused" in partitions(dbed), timeout=60)
        newer = dbed.remote.commit("add partition after", add_partition("after"))
        two.wait_applied(newer, timeout=60)
        assert one.proc is not None
        os.kill(one.proc.pid, signal.SIGCONT)
        # Resumed, login1 sends the write it had prepared (its token taken before the pause): the node refuses it.
        # Its lease thread may hear first that login2 leads; either way it steps down.
        fenced_run = "fenced: epoch 1 of login1 is older than epoch 2 of login2, seen on this node"
        ended = wait("login1's run ends refused by a node", lambda: [
            e for e in events(one, "run.end") if fenced_run in str(e.get("error"))], 40, daemons)
        assert ended[0]["outcome"] == "failed" and ended[0]["applied"] == 0
        one.wait_for("login1 stands by", lambda: role(one).get("role") == "standby" and
                     role(one).get("leader") == "login2", timeout=40)
        print(f"\nSIGSTOP of the leader -> standby leads after {took_over:.1f}s (lease 15s, renew 5s)")
        assert {"paused", "after"} <= partitions(dbed)
        for node in ("ctl", "gpu01", "gpu02"):
            text = dbed.bed.exec(node, f"cat /var/lib/reconciler/fence-{tag}/writes.log", check=False).stdout
            journal = [json.loads(line) for line in text.splitlines()]
            assert journal, node
            assert {(j["epoch"], j["holder"]) for j in journal} == {(2, "login2")}, (node, journal)
            seen = json.loads(dbed.bed.exec(node, f"cat /var/lib/reconciler/fence-{tag}/fence.json").stdout)
            assert (seen["epoch"], seen["holder"]) == (2, "login2")
            conf = dbed.bed.exec(node, "cat /etc/slurm/slurm.conf").stdout
            assert "PartitionName=after" in conf, node  # login1's late write of the older commit never landed
        assert leads(two) and not leads(one)
    finally:
        if one.proc is not None and one.proc.poll() is None:
            os.kill(one.proc.pid, signal.SIGCONT)
        for daemon in daemons:
            daemon.stop()


def test_both_restarted_at_once_one_leader_and_one_comment_per_head(dbed: DaemonBed,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Both daemons start together: exactly one leads. A PR gets one comment, posted by the leader only; after a
    restart of both at once, still one leader and no second comment for the same head."""
    from tests.forge.fake_github import FakeGitHub

    in_sync(dbed)
    token = "ghp_pairTestToken0123456789"
    monkeypatch.setenv("RECONCILER_TEST_FORGE_TOKEN", token)
    fake = FakeGitHub(token=token)
    work = dbed.remote.work
    tag = "restart"
    with fake.running():
        forge = {"type": "github", "url": fake.base_url, "repo": "acme/cluster",
                 "token_env": "RECONCILER_TEST_FORGE_TOKEN", "interval": "1s"}
        git(work, "checkout", "-q", "-B", "feature", "main")
        (work / "cluster.yaml").write_text(add_partition("prpair")["cluster.yaml"](  # type: ignore[operator]
            (work / "cluster.yaml").read_text()))
        git(work, "commit", "-qam", "PR: partition prpair")
        git(work, "push", "-q", "--force", "origin", "HEAD:refs/pull/9/head")
        sha = git(work, "rev-parse", "HEAD")
        git(work, "checkout", "-q", "main")
        fake.add_pull(9, sha, head_ref="feature")
        leaders: list[str] = []
        for round_ in range(2):
            from tests.transport.sshd_server import free_port

            ports = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
            names = ("login1", "login2")
            pair = [dbed.daemon(metrics_listen=ports[i], forge=forge, state_dir=str(dbed.root / f"{tag}-{names[i]}"),
                                ha=ha(names[i], tag, peers=[{"name": names[1 - i], "url": f"http://{ports[1 - i]}"}]))
                    for i in range(2)]
            try:
                wait("one leader", lambda pair=pair: sum(leads(d) for d in pair) == 1, 90, pair)
                time.sleep(6)  # longer than a renewal: the election has settled
                assert sum(leads(d) for d in pair) == 1
                leader = next(d for d in pair if leads(d))
                standby = next(d for d in pair if d is not leader)
                leaders.append(role(leader)["name"])
                wait("the PR comment", lambda: any(sha[:12] in c["body"] for c in fake.comments_on(9)), 90, pair)
                time.sleep(4)  # several PR intervals
                assert not events(standby, "prs.reported"), "a standby commented"
                actions = [e["comment"] for e in events(leader, "prs.reported")]
                assert actions == ["created"] if round_ == 0 else "created" not in actions, actions
            finally:
                stopped = [d.stop() for d in pair]  # a restart of both: SIGTERM to both at once
                assert max(stopped) < 30
        comments = fake.comments_on(9)
        assert len(comments) == 1
        assert fake.count("POST", "/issues/9/comments") == 1
        print(f"\nleaders of the two starts: {leaders}")
    assert token not in "".join(d.log_path.read_text() for d in dbed.started)


# ---------------------------------------------------------------- the leader's network cut

RESTART_FILE = "/etc/reconciler-pair/restart.conf"


def restart_yaml(version: int) -> str:
    """A file on gpu01 whose change restarts slurmd there, rolling (drained first while a job runs)."""
    return (f"files:\n  - path: {RESTART_FILE}\n    nodes: gpu01\n    mode: '0644'\n"
            f"    content: \"version {version}\\n\"\n    notify: [\"restart slurmd rolling\"]\n")


class LoginNamespace:
    """A 'login node' network namespace on the testbed's bridge, and an ssh_config that reaches the nodes through
    it; `cut()` takes its link down (the login node's network is gone), `mend()` brings it back."""

    def __init__(self, dbed: DaemonBed, tag: str, host: int) -> None:
        testbed = dbed.bed.testbed
        self.admin, self.ns, self.veth = f"{testbed.name}-admin", f"{testbed.name}{tag}", f"lg-{tag}"
        sh(f"ip netns add {self.ns}")
        sh(f"ip -n {self.admin} link add {self.veth} type veth peer name eth0 netns {self.ns}")
        sh(f"ip -n {self.admin} link set {self.veth} master br0 up")
        sh(f"ip -n {self.ns} addr add {testbed.subnet}.{host}/24 dev eth0 && ip -n {self.ns} link set eth0 up "
           f"&& ip -n {self.ns} link set lo up")
        text = testbed.ssh_config.read_text()
        self.ssh_config = dbed.root / f"ssh_config-{tag}"
        self.ssh_config.write_text(text.replace(f"--net=/run/netns/{self.admin} ", f"--net=/run/netns/{self.ns} "))
        assert f"/run/netns/{self.ns} " in self.ssh_config.read_text()

    def cut(self) -> None:
        sh(f"ip -n {self.admin} link set {self.veth} down")

    def mend(self) -> None:
        sh(f"ip -n {self.admin} link set {self.veth} up")

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], check=False, capture_output=True)


def sh(command: str) -> None:
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"{command}: {done.stderr}"


def job_state(dbed: DaemonBed, job: str) -> str:
    out = dbed.bed.exec("ctl", f"scontrol -o show job {job}", check=False).stdout
    found = re.search(r"\bJobState=(\S+)", out)
    return found.group(1) if found else ""


def restarts(daemon: DaemonProcess, node: str) -> int:
    """How many times the daemon restarted slurmd on NODE (its apply steps)."""
    return sum(1 for e in events(daemon, "apply.step")
               if e.get("node") == node and str(e.get("step", "")).startswith("restart slurmd"))


def test_network_cut_of_the_leader_during_a_rolling_restart(dbed: DaemonBed) -> None:
    """login1 (reaching the cluster through its own namespace) drains gpu01 for a rolling slurmd restart and waits
    for the job there; its link goes down. login2 takes over, finishes the restart once, the job completes (not
    killed), no node stays drained; login1, reconnected, stays a standby and restarts nothing."""
    in_sync(dbed)
    tag = "cut"
    login = LoginNamespace(dbed, tag, 200)
    daemons: list[DaemonProcess] = []
    try:
        from tests.transport.sshd_server import free_port

        ports = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        one = dbed.daemon(metrics_listen=ports[0], ssh={"config": str(login.ssh_config)},
                          ha=ha("login1", tag, peers=[{"name": "login2", "url": f"http://{ports[1]}"}]))
        daemons.append(one)
        one.wait_for("login1 leads", lambda: leads(one), timeout=120)
        two = dbed.daemon(metrics_listen=ports[1],
                          ha=ha("login2", tag, peers=[{"name": "login1", "url": f"http://{ports[0]}"}]))
        daemons.append(two)
        two.wait_for("login2 stands by", lambda: role(two).get("role") == "standby", timeout=120)
        job = dbed.bed.exec("ctl", "sbatch -w gpu01 -N1 -o /dev/null --wrap 'sleep 25' --parsable",
                            check=True).stdout.strip().split(";")[0]
        wait("job running", lambda: job_state(dbed, job) == "RUNNING", 60, daemons)
        head = dbed.remote.commit("restart slurmd on gpu01", {"restart.yaml": lambda _: restart_yaml(1)})
        wait("login1 waits for the job on gpu01", lambda: any(
            "waiting for running jobs" in str(e.get("step")) for e in events(one, "apply.step")), 90, daemons)
        assert "DRAIN" in dbed.bed.exec("ctl", "sinfo -h -n gpu01 -o %T").stdout.upper()
        login.cut()
        cut = time.monotonic()
        two.wait_for("login2 leads", lambda: leads(two), timeout=40)
        took_over = time.monotonic() - cut
        two.wait_applied(head, timeout=120)
        wait("job ended", lambda: job_state(dbed, job) not in ("RUNNING", "PENDING", "COMPLETING"), 90, daemons)
        assert job_state(dbed, job) == "COMPLETED"
        wait("no node drained", lambda: "drain" not in dbed.bed.exec("ctl", "sinfo -h -o %T").stdout.lower(), 60,
             daemons, dbed)
        login.mend()
        one.wait_for("login1 hears it is a standby", lambda: role(one).get("role") == "standby" and
                     role(one).get("leader") == "login2", timeout=60)
        time.sleep(6)  # a renewal later: still a standby, nothing restarted again
        assert restarts(one, "gpu01") + restarts(two, "gpu01") == 1, (restarts(one, "gpu01"), restarts(two, "gpu01"))
        assert restarts(two, "gpu01") == 1
        assert "drain" not in dbed.bed.exec("ctl", "sinfo -h -o %T").stdout.lower()
        written = dbed.bed.exec("gpu01", f"cat /var/lib/reconciler/fence-{tag}/writes.log").stdout.splitlines()
        assert {json.loads(x)["holder"] for x in written} == {"login1"}  # login1 wrote the file, login2 restarted
        print(f"\nnetwork cut of the leader -> standby leads after {took_over:.1f}s; rolling restart finished once")
    finally:
        for daemon in daemons:
            daemon.stop()
        login.remove()
        dbed.remote.commit("drop restart.yaml", {"restart.yaml": lambda _: "files: []\n"})
