"""Managed files and services on the testbed, over real SSH, with real Slurm and supervisord (issue 14):

- a changed /etc/sysctl.d/90-nccl.conf runs `sysctl --system` exactly once per node, however many files
  notify it, and the kernel value really changes (net.* keys are per network namespace: each testbed node
  has its own);
- a changed pyxis plugstack file restarts slurmd rolling, draining first the node whose job runs, waiting
  for the job (not killed), resuming the node;
- applying twice changes nothing the second time;
- `services:` stops and starts a supervisord program (itself defined by a managed file).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.testbed_fixture import Testbed

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]
SYSCTL = "/etc/sysctl.d/90-nccl.conf"
PYXIS = "/etc/slurm/plugstack.conf.d/pyxis.conf"
PROGRAM = "/etc/supervisor/conf.d/heartbeat.conf"

FILES = """\
files:
  - path: {sysctl}
    nodes: "gpu[01-02]"
    content: "# NCCL socket buffers\\nnet.core.somaxconn = {somaxconn}\\n"
    notify: [{{command: sysctl --system}}]
  - path: /etc/sysctl.d/91-nccl-extra.conf
    nodes: "gpu[01-02]"
    content: "net.ipv4.tcp_keepalive_time = {keepalive}\\n"
    notify: [{{command: sysctl --system}}]
  - path: {pyxis}
    roles: [compute]
    content: "# {{node}}: pyxis would go here (optional: slurmd starts without the plugin)\\n{pyxis_line}\\n"
    template: true
    notify: ["restart slurmd rolling"]
  - path: {program}
    nodes: gpu02
    content: "[program:heartbeat]\\ncommand=/bin/sleep infinity\\nautostart=false\\nautorestart=true\\n"
    notify: [{{command: supervisorctl update}}]
{extra}services:
  - {{name: heartbeat, nodes: gpu02, state: {heartbeat}}}
"""


@dataclass
class Site:
    """The testbed and a desired-state copy whose files.yaml each test rewrites."""

    bed: Testbed
    desired: Path

    def files(self, somaxconn: int = 1111, keepalive: int = 3333, pyxis_line: str = "# none",
              heartbeat: str = "running", extra: str = "") -> None:
        """Write files.yaml with these values (EXTRA: more `files:` entries)."""
        (self.desired / "files.yaml").write_text(FILES.format(
            sysctl=SYSCTL, pyxis=PYXIS, program=PROGRAM, somaxconn=somaxconn, keepalive=keepalive,
            pyxis_line=pyxis_line, heartbeat=heartbeat, extra=extra))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The reconciler CLI on the desired state."""
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, str(self.desired)],
                              capture_output=True, text=True, timeout=300, cwd=REPO)

    def sh(self, node: str, command: str) -> str:
        """Run a command inside a node; its stdout."""
        return self.bed.run(node, command, check=True, timeout=120).stdout


@pytest.fixture(scope="module")
def site(testbed_factory: Callable[..., Testbed], tmp_path_factory: pytest.TempPathFactory) -> Site:
    bed = testbed_factory(nodes=2, bare=False)
    desired = tmp_path_factory.mktemp("managed") / "desired"
    shutil.copytree(bed.desired_state, desired)
    site = Site(bed=bed, desired=desired)
    site.files()
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    return site


def lines(output: str, text: str) -> list[str]:
    """The output lines ending with TEXT."""
    return [line for line in output.splitlines() if line.rstrip().endswith(text)]


def wait_for(check: Callable[[], bool], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(1)
    return check()


def test_01_first_apply_converged_and_second_plan_is_clean(site: Site) -> None:
    assert site.sh("gpu01", f"cat {SYSCTL}").endswith("net.core.somaxconn = 1111\n")
    assert "gpu01: pyxis would go here" in site.sh("gpu01", f"cat {PYXIS}")
    assert "gpu02: pyxis would go here" in site.sh("gpu02", f"cat {PYXIS}")
    plan = site.cli("plan")
    assert plan.returncode == 0 and "no changes" in plan.stdout, plan.stdout + plan.stderr


def test_02_sysctl_change_runs_sysctl_system_once_per_node(site: Site) -> None:
    site.files(somaxconn=2222, keepalive=4444)  # two files, both notifying `sysctl --system`
    plan = site.cli("plan")
    assert plan.returncode == 2 and "runs `sysctl --system` on gpu[01-02]" in plan.stdout, plan.stdout
    result = site.cli("apply", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    for node in ("gpu01", "gpu02"):
        assert len(lines(result.stdout, f"{node}: sysctl --system")) == 1, result.stdout
        assert site.sh(node, "cat /proc/sys/net/core/somaxconn").strip() == "2222"
        assert site.sh(node, "cat /proc/sys/net/ipv4/tcp_keepalive_time").strip() == "4444"
    assert lines(result.stdout, "ctl: sysctl --system") == []
    assert site.cli("plan").returncode == 0


def test_03_pyxis_change_restarts_slurmd_rolling_around_a_running_job(site: Site) -> None:
    bed = site.bed
    bed.wait_idle()
    site.sh("ctl", "sbatch -w gpu01 -N1 --wrap 'sleep 15' -o /dev/null")
    assert wait_for(lambda: "RUNNING" in site.sh("ctl", "squeue -h -o %T"), 30)
    job = site.sh("ctl", "squeue -h -o %A").split()[0]
    pids = {n: site.sh(n, "cat /run/slurmd.pid").strip() for n in ("gpu01", "gpu02")}
    site.files(somaxconn=2222, keepalive=4444, pyxis_line="optional /usr/lib/slurm/spank_pyxis.so")
    plan = site.cli("plan")
    assert "restarts slurmd on gpu[01-02]" in plan.stdout and f"jobs {job}" in plan.stdout, plan.stdout
    result = site.cli("apply", "--yes")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert out.index("drain gpu01") < out.index("gpu01: restart slurmd") < out.index("resume gpu01"), out
    assert "drain gpu02" not in out and "gpu02: restart slurmd" in out
    state = site.sh("ctl", f"scontrol show job {job} -o")
    assert re.search(r"JobState=(COMPLETED|RUNNING|COMPLETING)", state), state
    for node in ("gpu01", "gpu02"):
        assert site.sh(node, "cat /run/slurmd.pid").strip() != pids[node]
    nodes = site.sh("ctl", "scontrol show node -o")
    for line in nodes.splitlines():
        assert "DRAIN" not in re.search(r"State=(\S+)", line).group(1), line  # type: ignore[union-attr]
    assert site.sh("ctl", "srun -N2 hostname").split() != []
    assert site.cli("plan").returncode == 0


def test_04_services_stop_and_start_a_supervisord_program(site: Site) -> None:
    status = "supervisorctl status heartbeat || true"
    assert "RUNNING" in site.sh("gpu02", status)
    site.files(somaxconn=2222, keepalive=4444, pyxis_line="optional /usr/lib/slurm/spank_pyxis.so",
               heartbeat="stopped")
    plan = site.cli("plan")
    assert plan.returncode == 2 and "stop heartbeat" in plan.stdout, plan.stdout
    assert "RUNNING" in site.sh("gpu02", status), "plan changed a service"
    result = site.cli("apply", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "STOPPED" in site.sh("gpu02", status)
    assert site.cli("plan").returncode == 0
    site.files(somaxconn=2222, keepalive=4444, pyxis_line="optional /usr/lib/slurm/spank_pyxis.so")
    result = site.cli("apply", "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "start heartbeat" in result.stdout and "RUNNING" in site.sh("gpu02", status)
    assert site.cli("plan").returncode == 0


def test_05_secret_file_is_written_but_never_shown(site: Site) -> None:
    secret = "S3CRET-value-never-shown-0123456789"
    site.files(somaxconn=2222, keepalive=4444, pyxis_line="optional /usr/lib/slurm/spank_pyxis.so",
               extra=f"  - {{path: /etc/site.secret, nodes: gpu01, content: {secret}, mode: '0400', secret: true}}\n")
    shown = [site.cli("plan"), site.cli("plan", "--format", "json", "--per-node"),
             site.cli("plan", "--format", "markdown")]
    assert all(p.returncode == 2 for p in shown), [p.stdout + p.stderr for p in shown]
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    for proc in [*shown, applied]:
        assert secret not in proc.stdout + proc.stderr
    assert "<secret sha256:" in shown[0].stdout
    assert site.sh("gpu01", "cat /etc/site.secret") == secret
    assert site.sh("gpu01", "stat -c %a /etc/site.secret").strip() == "400"
    assert site.cli("plan").returncode == 0


def test_06_state_absent_removes_a_file_once_and_validate_refuses_both(site: Site) -> None:
    """A file the previous state added, now `state: absent` (what a rollback to the commit before it needs): the plan
    says it is removed and where it is kept, apply moves it aside and runs its notify, the second plan is clean;
    one node asked for a file both present and absent is refused by validate at the file's line."""
    base = dict(somaxconn=2222, keepalive=4444, pyxis_line="optional /usr/lib/slurm/spank_pyxis.so")
    added = "  - {path: /etc/site.d/added.conf, nodes: 'gpu[01-02]', content: \"added: 1\\n\"}\n"
    site.files(**base, extra=added)
    assert site.cli("apply", "--yes").returncode == 0
    assert site.sh("gpu01", "cat /etc/site.d/added.conf") == "added: 1\n"
    site.sh("gpu02", "rm -f /etc/site.d/added.conf")  # already gone on gpu02: nothing to do there
    absent = ("  - {path: /etc/site.d/added.conf, nodes: 'gpu[01-02]', state: absent,"
              " notify: [{command: touch /tmp/added-removed}]}\n")
    site.files(**base, extra=absent)
    plan = site.cli("plan")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "remove /etc/site.d/added.conf (9 bytes, kept as /etc/site.d/added.conf.reconciler-bak)" in plan.stdout
    assert "gpu02" not in "".join(lines(plan.stdout, "kept as /etc/site.d/added.conf.reconciler-bak)")), plan.stdout
    applied = site.cli("apply", "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert site.sh("gpu01", "test ! -e /etc/site.d/added.conf && cat /etc/site.d/added.conf.reconciler-bak") == \
        "added: 1\n"
    assert site.sh("gpu01", "test -e /tmp/added-removed && echo notified") == "notified\n"
    assert site.sh("gpu02", "test -e /tmp/added-removed || echo not") == "not\n"
    again = site.cli("plan")
    assert again.returncode == 0 and "no changes" in again.stdout, again.stdout + again.stderr

    site.files(**base, extra=added + absent.replace("'gpu[01-02]'", "gpu02"))
    refused = site.cli("validate")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stdout + refused.stderr
    assert re.search(r"files\.yaml:\d+:\d+: files\[5\]\.state: files\[5\] wants /etc/site\.d/added\.conf absent and "
                     r"files\[4\] present on node gpu02", refused.stdout + refused.stderr), refused.stdout + refused.stderr
    site.files(**base, extra=absent.replace("state: absent,", "state: absent, content: x,"))
    refused = site.cli("validate")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stdout + refused.stderr
    assert "state: absent is removed: content would say nothing" in refused.stdout + refused.stderr
    assert site.sh("gpu01", "test ! -e /etc/site.d/added.conf && echo gone") == "gone\n"  # validate changed nothing
