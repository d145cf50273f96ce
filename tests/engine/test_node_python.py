"""Every Python program the reconciler sends to nodes, run by the node's own python3 with warnings as errors
(`-W error`): 3.11 on 22.05 nodes (Debian 12), 3.13 on 24.11 nodes (Debian 13), over real SSH. A module removed or
deprecated in the node's Python, an invalid escape sequence (SyntaxWarning since 3.12), an unclosed file
(ResourceWarning) each fail here by name."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from reconciler.engine.fence import RUN_SCRIPT, fenced_command
from reconciler.engine.ops import WriteFile
from reconciler.engine.owed_ledger import _SCRIPT as OWED_SCRIPT
from reconciler.engine.owed_ledger import OWED_COMMAND
from reconciler.engine.remote_write import REMOTE_SCRIPT as WRITE_SCRIPT
from reconciler.engine.remote_write import WRITE_COMMAND, write_request
from reconciler.facts.gather import AGENT_COMMAND, GATHER_COMMAND, REMOTE_SCRIPT, FactRequest
from reconciler.facts.services import _SUPERVISOR_RPC, status_python
from reconciler.ha.lease import LEASE_COMMAND, LEASE_SCRIPT
from reconciler.importer.packages import snippet
from reconciler.model import ServiceManager
from tests.engine.conftest import Bed

pytestmark = pytest.mark.testbed

NODE_PYTHON = {"22.05": (3, 11), "24.11": (3, 13)}  # the python3 of each release's Debian
SCRATCH = "/var/tmp/node-python"
FENCE = {"epoch": 1, "holder": "test", "dir": f"{SCRATCH}/fence"}


def strict(command: str) -> str:
    """COMMAND (which starts with `python3 `) with warnings made errors (-W is honoured under -I, unlike
    PYTHONWARNINGS)."""
    assert command.startswith("python3 ")
    return "python3 -W error " + command[len("python3 "):]


def ssh(bed: Bed, command: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """COMMAND on gpu01 over real SSH, STDIN fed to it."""
    argv = ["ssh", "-F", str(bed.state_dir / "ssh_config"), "-o", "BatchMode=yes", "gpu01", command]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120)


def test_the_node_runs_the_python_of_its_release(bed: Bed) -> None:
    done = ssh(bed, "python3 -c 'import sys; print(sys.version_info[0], sys.version_info[1])'")
    assert tuple(int(x) for x in done.stdout.split()) == NODE_PYTHON[bed.testbed.slurm], done.stdout + done.stderr


@pytest.mark.parametrize("name", ["gather", "write", "owed", "lease", "fence", "supervisor", "services", "packages"])
def test_every_script_compiles_without_warnings(bed: Bed, name: str) -> None:
    source = {"gather": REMOTE_SCRIPT, "write": WRITE_SCRIPT, "owed": OWED_SCRIPT, "lease": LEASE_SCRIPT,
              "fence": RUN_SCRIPT, "supervisor": _SUPERVISOR_RPC,
              "services": status_python(ServiceManager(type="supervisord"), ["sshd"]), "packages": snippet(["slurm*"])}
    assert source[name]
    done = ssh(bed, "python3 -W error -c 'import sys; compile(sys.stdin.read(), sys.argv[1], \"exec\")' " + name,
               stdin=str(source[name]))
    assert done.returncode == 0 and not done.stderr, done.stderr


def full_request() -> FactRequest:
    """A request using every part of the fact script: files, secrets, hashes, stats, globs, commands, snippets."""
    return FactRequest(files=["/etc/hostname", "/etc/munge/munge.key", "/nonexistent"], secret=["/etc/munge/munge.key"],
                       hashes=["/etc/passwd"], stats=["/etc", "/nonexistent"], globs={"/etc/host*": "files"},
                       commands={"version": "slurmd -V", "fails": "exit 3", "slow": "sleep 5"},
                       python={"services": status_python(ServiceManager(type="supervisord"), ["sshd", "slurmd"]) or "",
                               "packages": snippet(["slurm*", "munge"])}, timeout=2)


def test_fact_script_one_shot_and_agent_under_warnings_as_errors(bed: Bed) -> None:
    one = ssh(bed, strict(GATHER_COMMAND), stdin=full_request().encode())
    assert one.returncode == 0 and not one.stderr, one.stderr
    answer = json.loads(one.stdout)
    assert "error" not in answer, answer
    commands = answer["commands"]
    assert commands["version"]["rc"] == 0 and bed.testbed.slurm in commands["version"]["stdout"]
    assert commands["fails"]["rc"] == 3 and commands["slow"] == {"rc": None, "stdout": "", "stderr": "timed out"}
    assert commands["services"]["rc"] == 0 and "sshd" in commands["services"]["stdout"], commands["services"]
    assert commands["packages"]["rc"] == 0, commands["packages"]
    assert "content" not in answer["files"]["/etc/munge/munge.key"] and answer["files"]["/etc/passwd"]["sha256"]
    assert answer["globs"]["/etc/host*"] and answer["stats"]["/nonexistent"] == {"exists": False}
    lines = "\n".join(FactRequest(files=["/etc/hostname"], commands={"n": f"echo {i}"}).encode(i) for i in (1, 2))
    agent = ssh(bed, strict(AGENT_COMMAND), stdin=lines + "\n")
    assert agent.returncode == 0 and not agent.stderr, agent.stderr
    assert [json.loads(line)["commands"]["n"]["stdout"] for line in agent.stdout.splitlines()] == ["1\n", "2\n"]


def test_writes_ledger_lease_and_fence_under_warnings_as_errors(bed: Bed) -> None:
    ssh(bed, f"rm -rf {SCRATCH}")
    ops = [WriteFile(path=f"{SCRATCH}/a.conf", content="one\n", mode="0640"),
           WriteFile(path=f"{SCRATCH}/a.conf", content="two\n", mode="0640")]
    written = ssh(bed, strict(WRITE_COMMAND), stdin=write_request(ops, fence=FENCE))
    assert written.returncode == 0 and not written.stderr, written.stderr
    assert [r.get("ok") for r in json.loads(written.stdout)] == [True, True], written.stdout
    assert ssh(bed, f"cat {SCRATCH}/a.conf").stdout == "two\n"
    for owed in ([{"step": "x"}], None):
        done = ssh(bed, strict(OWED_COMMAND), stdin=json.dumps({"path": f"{SCRATCH}/owed.json", "owed": owed,
                                                                  "fence": FENCE}))
        assert done.returncode == 0 and not done.stderr and json.loads(done.stdout) == {"ok": True}, done.stderr
    for op in ("acquire", "load", "release"):
        done = ssh(bed, strict(LEASE_COMMAND), stdin=json.dumps({"op": op, "holder": "test", "duration": 30,
                                                                   "dir": f"{SCRATCH}/lease"}))
        assert done.returncode == 0 and not done.stderr and "error" not in json.loads(done.stdout), done.stderr
    fenced = ssh(bed, strict(fenced_command("echo fenced-ran", FENCE)))
    assert fenced.returncode == 0 and fenced.stdout == "fenced-ran\n" and not fenced.stderr, fenced.stderr
    stale = ssh(bed, strict(fenced_command("echo never", {**FENCE, "epoch": 0})))
    assert stale.returncode == 75 and "never" not in stale.stdout
    supervisor = ssh(bed, "python3 -W error -c " + shlex.quote(_SUPERVISOR_RPC))
    assert supervisor.returncode == 0 and "sshd" in supervisor.stdout and not supervisor.stderr, supervisor.stderr
    ssh(bed, f"rm -rf {SCRATCH}")
