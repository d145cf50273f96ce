"""Fencing tokens on commands and writes (reconciler/engine/fence.py) and a daemon's role (reconciler/ha/role.py):
two HighAvailability objects sharing one lease directory, a deposed leader refused by the 'nodes' (local sh, real
scripts, real flock)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from reconciler.desired.inventory import NodeSpec
from reconciler.engine.fence import FENCED_EXIT, FencingTransport, fenced_command, is_fenced
from reconciler.engine.ops import WriteFile
from reconciler.engine.remote_write import WRITE_COMMAND, write_request
from reconciler.ha.role import HighAvailability
from reconciler.transport.base import Transport
from tests.ha.local_shell import LocalShell, spec


def run(command: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True, check=False)


def test_fenced_command_passes_stdin_output_and_exit_code_through(tmp_path: Path) -> None:
    fence = {"epoch": 4, "holder": "login1", "dir": str(tmp_path)}
    done = run(fenced_command("cat; echo \"it's\" $((1+2)); exit 3", fence), stdin="in\n")
    assert (done.returncode, done.stdout) == (3, "in\nit's 3\n")
    assert json.loads((tmp_path / "fence.json").read_text())["epoch"] == 4


def test_an_older_epoch_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run(fenced_command("true", {"epoch": 5, "holder": "login2", "dir": str(tmp_path)}))
    done = run(fenced_command(f"touch {marker}", {"epoch": 4, "holder": "login1", "dir": str(tmp_path)}))
    assert done.returncode == FENCED_EXIT
    assert done.stderr == "fenced: epoch 4 of login1 is older than epoch 5 of login2, seen on this node\n"
    assert not marker.exists()


# Terms of seconds: a tick runs a python3 process over the shell, and a term shorter than that process and the
# command after it (0.8-2 s here before) ran out under CI's load before the command was sent.
TERM = 4.0


def pair(tmp_path: Path, shell: LocalShell, duration: float = TERM) -> tuple[HighAvailability, HighAvailability]:
    @contextlib.contextmanager
    def connect() -> Iterator[tuple[Transport, NodeSpec]]:
        yield shell, spec("ctl")

    def make(name: str) -> HighAvailability:
        return HighAvailability(name, "ctl", str(tmp_path / "lease"), duration, duration / 4, connect,
                                fence_dir=str(tmp_path / "node"))

    return make("login1"), make("login2")


def test_a_deposed_leader_is_refused_by_the_node_and_steps_down(tmp_path: Path) -> None:
    shell = LocalShell()
    one, two = pair(tmp_path, shell)
    one.tick()
    two.tick()
    assert (one.is_leader(), two.is_leader()) == (True, False)
    assert two.fence() is None
    target = tmp_path / "etc" / "x.conf"
    request = write_request([WriteFile(path=str(target), content="first\n", mode="0644", owner=None, group=None)])
    node = spec("gpu01")
    old_token = one.fence()  # captured now: as a process paused after its local check would still hold it
    assert FencingTransport(shell, one.fence, one.fenced, WRITE_COMMAND).run(node, WRITE_COMMAND, stdin=request).ok
    time.sleep(TERM + 0.1)  # login1 stops renewing (paused): its lease runs out
    assert not one.is_leader() and one.fence() is None  # its own clock already says so
    two.tick()
    assert two.is_leader() and two.epoch == 2
    newer = write_request([WriteFile(path=str(target), content="second\n", mode="0644", owner=None, group=None)])
    assert FencingTransport(shell, two.fence, two.fenced, WRITE_COMMAND).run(node, WRITE_COMMAND, stdin=newer).ok
    # login1 resumes with the token it held before the pause: the node refuses, login1 hears of it
    stale = FencingTransport(shell, lambda: old_token, one.fenced, WRITE_COMMAND)
    late = write_request([WriteFile(path=str(target), content="late\n", mode="0644", owner=None, group=None)])
    refused = stale.run(node, WRITE_COMMAND, stdin=late)
    assert is_fenced(refused)
    assert target.read_text() == "second\n"
    assert one.stepped_down is not None and one.stepped_down.startswith("fenced: gpu01: fenced: epoch 1 of login1")
    restart = stale.run(node, "touch " + str(tmp_path / "restarted"))
    assert restart.exit_code == FENCED_EXIT and not (tmp_path / "restarted").exists()
    journal = [json.loads(line) for line in (tmp_path / "node" / "writes.log").read_text().splitlines()]
    assert [(j["epoch"], j["holder"]) for j in journal] == [(1, "login1"), (2, "login2")]


def test_without_the_lease_nothing_is_sent(tmp_path: Path) -> None:
    shell = LocalShell()
    one, two = pair(tmp_path, shell)
    two.tick()
    one.tick()  # login2 leads
    transport = FencingTransport(shell, one.fence, one.fenced, WRITE_COMMAND)
    before = len(shell.sent)
    result = transport.run(spec("gpu01"), "touch " + str(tmp_path / "x"))
    assert result.error is not None and "no longer holds the lease" in result.error
    many = transport.run_many([spec("gpu01"), spec("gpu02")], "true")
    assert all(r.error for r in many.values())
    assert len(shell.sent) == before and not (tmp_path / "x").exists()


def test_release_lets_the_standby_lead_at_its_next_renewal(tmp_path: Path) -> None:
    shell = LocalShell()
    one, two = pair(tmp_path, shell, duration=30.0)
    one.tick()
    two.tick()
    assert two.snapshot()["leader"] == "login1" and two.snapshot()["role"] == "standby"
    one.release()
    assert not one.is_leader()
    two.tick()
    assert two.is_leader() and two.snapshot()["role"] == "leader" and two.epoch == 2


def test_an_unreachable_lease_node_makes_the_leader_step_down_only_when_its_lease_ran_out(tmp_path: Path) -> None:
    shell = LocalShell()
    one, _ = pair(tmp_path, shell)
    one.tick()
    assert one.is_leader()

    @contextlib.contextmanager
    def unreachable() -> Iterator[tuple[Transport, NodeSpec]]:
        class Down(LocalShell):
            def run(self, node, command, *, stdin=None, timeout=None):  # type: ignore[no-untyped-def]
                from reconciler.transport.base import CommandResult
                return CommandResult(node.name, None, "", "", 0.0, error="timed out")
        yield Down(), spec("ctl")

    one.connect = unreachable
    one.tick()
    assert one.is_leader() and one.error is not None  # still within its lease
    time.sleep(TERM)
    one.tick()
    assert not one.is_leader()
    assert one.stepped_down is not None and "lease not renewed in time" in one.stepped_down


def test_a_lost_lease_store_heals_above_the_epochs_the_nodes_have_seen(tmp_path: Path) -> None:
    """The lease directory is wiped (a reinstalled controller): the next leader starts at epoch 1, the nodes
    refuse it (they saw 5); the refusal raises the floor, and the next term is above it."""
    shell = LocalShell()
    node = spec("gpu01")
    run(fenced_command("true", {"epoch": 5, "holder": "login2", "dir": str(tmp_path / "node")}))
    one, _ = pair(tmp_path, shell)
    one.tick()
    assert one.epoch == 1
    refused = FencingTransport(shell, one.fence, one.fenced, WRITE_COMMAND).run(node, "true")
    assert refused.exit_code == FENCED_EXIT and not one.is_leader() and one.floor == 6
    time.sleep(TERM + 0.2)  # its own old term runs out
    one.tick()
    assert one.is_leader() and one.epoch == 6
    assert FencingTransport(shell, one.fence, one.fenced, WRITE_COMMAND).run(node, "true").ok


def expire_lease(tmp_path: Path) -> None:
    """End the current term in the lease file, as its running out would (without waiting for it)."""
    lease = tmp_path / "lease" / "lease.json"
    lease.write_text(json.dumps({**json.loads(lease.read_text()), "expires": 0.0}))


class AgentShell(LocalShell):
    """Fact agents stood up as one-shot runs of the real fact script (same request, same answer)."""

    agents = True

    def ask_many(self, nodes, command, line, *, timeout=None):  # type: ignore[no-untyped-def]
        from reconciler.facts.gather import GATHER_COMMAND

        out = {}
        for node in nodes:
            request = line(node)
            out[node.name] = self.run(node, GATHER_COMMAND, stdin=request.decode() if isinstance(request, bytes)
                                      else request)
        return out


def test_the_fact_agent_remembers_epochs_and_refuses_an_older_one(tmp_path: Path) -> None:
    """A leader's fact requests carry its epoch: the agent records it; a deposed leader's request is refused
    (its facts say why) and the deposed leader steps down."""
    from reconciler.facts.gather import FactRequest

    shell = AgentShell()
    one, two = pair(tmp_path, shell)
    one.tick()
    request = FactRequest(commands={"hello": "echo hi"}).encode()
    old_token = one.fence()
    answer = FencingTransport(shell, one.fence, one.fenced, WRITE_COMMAND).ask_many([spec("gpu01")], "agent",
                                                                                   lambda _: request)
    assert json.loads(answer["gpu01"].stdout)["commands"]["hello"]["stdout"] == "hi\n"
    assert json.loads((tmp_path / "node" / "fence.json").read_text())["epoch"] == 1
    expire_lease(tmp_path)  # login1's term as the lease holds it is over (as if it had run out)
    two.tick()
    assert two.epoch == 2
    FencingTransport(shell, two.fence, two.fenced, WRITE_COMMAND).ask_many([spec("gpu01")], "agent", lambda _: request)
    stale = FencingTransport(shell, lambda: old_token, one.fenced, WRITE_COMMAND).ask_many(
        [spec("gpu01")], "agent", lambda _: request)
    assert json.loads(stale["gpu01"].stdout) == {
        "error": "fenced: epoch 1 of login1 is older than epoch 2 of login2, seen on this node"}
    assert is_fenced(stale["gpu01"])
    assert one.epoch is None and str(one.stepped_down).startswith("fenced: gpu01: fenced: epoch 1 of login1")
