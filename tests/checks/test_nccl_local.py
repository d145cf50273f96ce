"""NCCL checks in local mode (no Slurm): the exact command line, and real runs of it through `sh`.

The node side is a real shell running the real command line; only nccl-tests is the testbed's stand-in
(deploy/testbed/standins/all_reduce_perf, replaying the recorded 8x H200 output or its degraded copy), and,
for the busy case, a two-line stand-in `nvidia-smi` that lists one compute process.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from reconciler.checks import store
from reconciler.checks.nccl.run import LOCAL_BUSY, local_argv, local_command, run_local
from reconciler.checks.runner import check_run, policies_of
from reconciler.checks.slurm_view import SlurmView
from reconciler.desired.inventory import NodeSpec, node_specs
from reconciler.desired.loader import LoadedState
from reconciler.model import DesiredState, NcclCheck
from reconciler.transport.base import BaseTransport, CommandResult

REPO = Path(__file__).resolve().parents[2]
STANDIN = str(REPO / "deploy" / "testbed" / "standins" / "all_reduce_perf")


class LocalShell(BaseTransport):
    """Runs each node's command in a local `sh` (the node's environment from `env_of`); records commands."""

    def __init__(self, env_of: dict[str, dict[str, str]] | None = None, path: str | None = None) -> None:
        super().__init__(4)
        self.env_of = env_of or {}
        self.path = path
        self.commands: list[tuple[str, str]] = []

    def run(self, node: NodeSpec, command: str, *, stdin: str | None = None,
            timeout: float | None = None) -> CommandResult:
        self.commands.append((node.name, command))
        env = {**os.environ, **self.env_of.get(node.name, {})}
        if self.path:
            env["PATH"] = f"{self.path}:{env['PATH']}"
        clock = time.monotonic()
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=timeout,
                              check=False)
        return CommandResult(node.name, done.returncode, done.stdout, done.stderr, time.monotonic() - clock)


def local(**overrides: object) -> NcclCheck:
    data: dict[str, object] = {"name": "burnin", "mode": "local", "nodes": "gpu[01-02]", "ntasks_per_node": 2,
                               "binary": STANDIN, "thresholds": {"min_busbw": 330, "at_size": "1G"}}
    data.update(overrides)
    return NcclCheck.model_validate(data)


def state(check: NcclCheck) -> DesiredState:
    return DesiredState.model_validate({
        "cluster": {"name": "pod", "slurm_version": "23.11", "controllers": ["ctl"],
                    "node_sets": [{"nodes": "gpu[01-02]", "gpus": {"count": 2}}],
                    "partitions": [{"name": "gpu", "nodes": "gpu[01-02]", "default": True}]},
        "nodes": [{"name": "ctl", "roles": ["controller", "login"]}, {"name": "gpu[01-02]", "roles": ["compute"]}],
        "checks": {"nccl": [check.model_dump(exclude_defaults=True)]}})


def test_local_command_line() -> None:
    check = local(binary="all_reduce_perf", env={"NCCL_NVLS_ENABLE": "0"}, timeout="5m")
    assert local_command(check) == (
        "timeout -k 30 300 env NCCL_NVLS_ENABLE=0 sh -c '! command -v nvidia-smi >/dev/null || "
        "[ -z \"$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)\" ] || "
        "{ echo \"reconciler: GPUs in use by other processes, not started\"; exit 75; }; "
        "echo \"# reconciler: job local step $$ rank 0 on $(hostname)\"; exec \"$@\"' "
        "sh all_reduce_perf -b 4G -e 4G -n 5 -w 1 -c 0 -g 2")
    assert "nvidia-smi" not in local_command(local(only_idle=False, env_profile="/etc/nccl.sh"))
    assert ". /etc/nccl.sh || exit 1" in local_command(local(env_profile="/etc/nccl.sh"))


def test_local_argv_sets_the_gpus_once() -> None:
    check = local(args=["-g", "8", "-b", "8", "--ngpus=4", "--ngpus", "3", "-e", "8G"], ntasks_per_node=4,
                  gpus_per_task=2)
    assert local_argv(check) == [STANDIN, "-b", "8", "-e", "8G", "-g", "8"]


def test_local_mode_has_no_container() -> None:
    with pytest.raises(ValidationError, match="container_image needs srun"):
        local(container_image="nvcr.io#nvidia/pytorch:24.04-py3")


def test_run_local_judges_each_node_from_a_real_shell() -> None:
    """gpu01 replays the healthy run, gpu02 the degraded one: pass with its value, fail with the drain wording."""
    check = local()
    specs = node_specs(state(check))
    shell = LocalShell({"gpu02": {"RECONCILER_STANDIN_NCCL": "degraded"}})
    results = {r.node: r for r in run_local(shell, [specs["gpu01"], specs["gpu02"]], check)}
    assert sorted(node for node, _ in shell.commands) == ["gpu01", "gpu02"]
    good, bad = results["gpu01"], results["gpu02"]
    assert good.ok and good.job_id == "local" and good.value == pytest.approx(365.09)
    assert good.message == "all_reduce busbw 365.1 GB/s at >= 1 GiB (min 330)"  # the 4 GiB row, lower placement
    assert good.gpu_seconds == pytest.approx(2 * good.duration) and good.duration > 0
    assert not bad.ok and not bad.error and bad.message == "nccl all_reduce busbw 120.5 < 330 GB/s"


def test_busy_gpus_are_not_benchmarked(tmp_path: Path) -> None:
    """A node whose nvidia-smi lists a compute process does not start the binary: an error, no GPU-seconds."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n# stand-in: one compute process holds a GPU\necho 4242\n")
    smi.chmod(0o755)
    check = local()
    specs = node_specs(state(check))
    [result] = run_local(LocalShell(path=str(tmp_path)), [specs["gpu01"]], check)
    assert result.error and result.gpu_seconds == 0.0
    assert result.message == "not run: reconciler: GPUs in use by other processes, not started"
    assert LOCAL_BUSY == 75
    [forced] = run_local(LocalShell(path=str(tmp_path)), [specs["gpu01"]], local(only_idle=False))
    assert forced.ok


def test_check_run_in_local_mode_asks_no_slurm_and_records(tmp_path: Path) -> None:
    """`reconciler check`'s path: only the target nodes are contacted; results are stored; nothing drains."""
    check = local()
    desired = state(check)
    shell = LocalShell({"gpu02": {"RECONCILER_STANDIN_NCCL": "degraded"}})
    conn = sqlite3.connect(":memory:")
    outcome = check_run(LoadedState(state=desired, root=tmp_path), shell, conn, names=["burnin"])
    assert sorted(node for node, _ in shell.commands) == ["gpu01", "gpu02"]  # no command to ctl
    assert [(r.node, r.status) for r in outcome.results] == [("gpu01", "PASS"), ("gpu02", "FAIL")]
    assert outcome.actions == []
    assert {(r.node, r.ok) for r in store.latest(conn)} == {("gpu01", True), ("gpu02", False)}
    assert not policies_of(desired, SlurmView())[("nccl", "burnin")].drain_on_fail
