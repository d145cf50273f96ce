"""NCCL checks through Slurm: exact srun lines, grouping by mode, which nodes run, judging real outputs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reconciler.checks.actions import owns
from reconciler.checks.nccl.run import (
    STEP_PRELUDE,
    Group,
    StepRun,
    batch_script,
    groups_for,
    judge_step,
    launch_command,
    parse_batch,
    plan_nccl,
    reservation_create_command,
    reservation_delete_command,
)
from reconciler.checks.slurm_view import parse_view
from reconciler.model import DesiredState, NcclCheck

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
HEALTHY = (FIXTURES / "h200x8_all_reduce_perf.txt").read_text()
DEGRADED = (FIXTURES / "handmade_h200x8_degraded_all_reduce.txt").read_text()
PRELUDE_SH = STEP_PRELUDE.replace("'", "'\"'\"'")  # as shlex.join quotes it inside sh -c '...'


def nightly(**overrides: object) -> NcclCheck:
    data: dict[str, object] = {"name": "nightly", "partition": "gpu", "thresholds": {"min_busbw": 330, "at_size": "1G"}}
    data.update(overrides)
    return NcclCheck.model_validate(data)


def state(nodes: str = "dgx[01-07]") -> DesiredState:
    return DesiredState.model_validate({
        "cluster": {"name": "pod", "slurm_version": "23.11", "controllers": ["login01"],
                    "node_sets": [{"nodes": nodes, "gpus": {"count": 8}}],
                    "partitions": [{"name": "gpu", "nodes": nodes, "default": True}]},
        "nodes": [{"name": "login01", "roles": ["controller", "login"]}, {"name": nodes, "roles": ["compute"]}]})


# ---------------------------------------------------------------- exact command lines


def test_single_node_srun_line_of_the_defaults() -> None:
    assert launch_command(nightly(), ["dgx01"]) == (
        "timeout -k 30 960 srun --job-name=reconciler-nccl-nightly --partition=gpu --nodes=1 --nodelist=dgx01 "
        "--ntasks-per-node=8 --gpus-per-task=1 --exclusive --immediate=60 --time=15 --kill-on-bad-exit=1 "
        "--mpi=pmix --export=ALL sh -c '" + PRELUDE_SH + "; exec \"$@\"' sh all_reduce_perf -b 4G -e 4G -n 5 -w 1 -c 0 -g 1")


def test_pyxis_container_env_profile_and_reservation_line() -> None:
    check = nightly(name="tcpxo", partition=None, nodes="a3m[01-04]", mode="pairs", mpi="pmi2",
                    binary="/opt/nccl-tests/build/all_gather_perf", args=["-b", "8", "-e", "8G", "-f", "2", "-g", "8"],
                    ntasks_per_node=1, gpus_per_task=0, timeout="10m",
                    container_image="nvcr.io#nvidia/pytorch:24.04-py3",
                    container_mounts=["/var/lib/tcpxo/lib64:/var/lib/tcpxo/lib64", "/shared:/shared"],
                    env={"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "eth0 eth1"},
                    env_profile="/var/lib/tcpxo/lib64/nccl-env-profile.sh")
    assert launch_command(check, ["a3m01", "a3m02"], reservation="reconciler-tcpxo-1") == (
        "timeout -k 30 660 env NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_DEBUG=WARN 'NCCL_SOCKET_IFNAME=eth0 eth1' "
        "srun --job-name=reconciler-nccl-tcpxo --reservation=reconciler-tcpxo-1 --nodes=2 '--nodelist=a3m[01-02]' "
        "--ntasks-per-node=1 --exclusive --immediate=60 --time=10 --kill-on-bad-exit=1 --mpi=pmi2 "
        "'--container-image=nvcr.io#nvidia/pytorch:24.04-py3' "
        "--container-mounts=/var/lib/tcpxo/lib64:/var/lib/tcpxo/lib64,/shared:/shared --export=ALL "
        "sh -c '" + PRELUDE_SH + "; . /var/lib/tcpxo/lib64/nccl-env-profile.sh || exit 1; exec \"$@\"' "
        "sh /opt/nccl-tests/build/all_gather_perf -b 8 -e 8G -f 2 -g 8")


def test_partition_mode_and_mpi_none() -> None:
    check = nightly(mode="partition", mpi="none", timeout="90s")
    line = launch_command(check, ["dgx03", "dgx01", "dgx02", "dgx04"])
    assert " --nodes=4 '--nodelist=dgx[01-04]' " in line  # quoted: brackets are shell globs
    assert " --mpi=none " in line and " --time=2 " in line and line.startswith("timeout -k 30 150 srun ")


def test_mpi_unset_leaves_it_to_slurm() -> None:
    assert "--mpi" not in launch_command(nightly(mpi=None), ["dgx01"])


def test_reservation_commands() -> None:
    assert reservation_create_command("reconciler-nightly-5", ["dgx02", "dgx01"], 21) == (
        "scontrol create reservation reservationname=reconciler-nightly-5 starttime=now duration=21 "
        "'nodes=dgx[01-02]' users=root flags=maint,ignore_jobs")
    assert reservation_delete_command("reconciler-nightly-5") == "scontrol delete reservationname=reconciler-nightly-5"


# ---------------------------------------------------------------- modes


def test_groups_by_mode() -> None:
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    assert groups_for(nightly(), nodes[:2]) == [[Group(("n1",), ("n1",)), Group(("n2",), ("n2",))]]
    assert groups_for(nightly(mode="partition"), nodes) == [[Group(tuple(nodes), tuple(nodes))]]
    assert groups_for(nightly(mode="pairs"), nodes, {"n3"}) == [
        [Group(("n1", "n2"), ("n1", "n2")), Group(("n3", "n4"), ("n3", "n4"), reserved=True)],
        [Group(("n5", "n1"), ("n5",))],  # the odd node borrows the first node, only n5 is judged
    ]
    assert groups_for(nightly(mode="pairs"), []) == []


# ---------------------------------------------------------------- which nodes run

SCONTROL = """\
NodeName=dgx01 State=IDLE Partitions=gpu
NodeName=dgx02 State=MIXED Partitions=gpu
NodeName=dgx03 State=IDLE+DRAIN Partitions=gpu Reason=maintenance [root@2026-11-21T02:20:01]
NodeName=dgx04 State=IDLE+DRAIN Partitions=gpu Reason=reconciler: nccl nightly: all_reduce busbw 118.6 < 330 GB/s [root@2026-11-21T02:20:01]
NodeName=dgx05 State=DOWN* Partitions=gpu Reason=Not responding [slurm@2026-11-21T02:21:00]
NodeName=dgx06 State=IDLE+DRAIN Partitions=gpu Reason=reconciler: nccl nightly: all_reduce busbw 100.0 < 330 GB/s [root@2026-11-21T02:20:01]
NodeName=dgx07 State=IDLE+MAINTENANCE+RESERVED Partitions=gpu
"""
SQUEUE = "41|RUNNING|dgx02|alice|train\n"


def view_of(scontrol: str = SCONTROL, squeue: str = SQUEUE):  # type: ignore[no-untyped-def]
    return parse_view(f"@@reconciler-begin nodes\n{scontrol}@@reconciler-end nodes 0\n"
                      f"@@reconciler-begin jobs\n{squeue}@@reconciler-end jobs 0\n")


def test_plan_runs_idle_nodes_retests_its_own_drains_and_skips_the_rest() -> None:
    plan = plan_nccl(nightly(), state(), view_of(), owns=lambda r: owns("nccl", "nightly", r),
                     blocked={"dgx06": "gpu-basics"})
    assert plan.run == ["dgx01"]
    assert plan.retest == ["dgx04"]
    assert {r.node: r.message for r in plan.skipped} == {
        "dgx02": "skipped: not idle (MIXED, jobs 41)",
        "dgx03": "skipped: drained (maintenance)",
        "dgx05": "skipped: node is DOWN*",
        "dgx06": "skipped: drained by this check; gpu-basics still fails",
        "dgx07": "skipped: node is IDLE+MAINTENANCE+RESERVED",
    }
    assert all(r.skipped and r.ok for r in plan.skipped)
    assert plan.waves == [[Group(("dgx01",), ("dgx01",)), Group(("dgx04",), ("dgx04",), reserved=True)]]
    assert plan.reserve == ["dgx04"]


def test_plan_without_actions_does_not_retest() -> None:
    plan = plan_nccl(nightly(), state(), view_of(), act=False, owns=lambda r: owns("nccl", "nightly", r))
    assert plan.retest == [] and plan.reserve == []
    assert "not done without actions" in next(r.message for r in plan.skipped if r.node == "dgx04")


def test_plan_only_idle_false_runs_busy_nodes_and_limits_to_given_nodes() -> None:
    plan = plan_nccl(nightly(only_idle=False), state(), view_of(), {"dgx01", "dgx02", "dgx03"})
    assert plan.run == ["dgx01", "dgx02"]
    assert [r.node for r in plan.skipped] == ["dgx03"]


def test_plan_pairs_with_a_single_idle_node_runs_nothing() -> None:
    plan = plan_nccl(nightly(mode="pairs"), state(), view_of())
    assert plan.waves == [] and plan.run == []
    assert any(r.node == "dgx01" and "needs a second idle node" in r.message for r in plan.skipped)


def test_plan_when_the_controller_cannot_answer() -> None:
    view = parse_view("@@reconciler-begin nodes\nslurm_load_node error: Unable to contact slurm controller\n"
                      "@@reconciler-end nodes 1\n")
    plan = plan_nccl(nightly(), state("dgx[01-02]"), view)
    assert plan.waves == []
    assert [(r.node, r.error, r.ok) for r in plan.skipped] == [("dgx01", True, False), ("dgx02", True, False)]
    assert "Unable to contact slurm controller" in plan.skipped[0].message


def test_partition_targets_come_from_the_desired_state() -> None:
    plan = plan_nccl(nightly(mode="partition"), state("dgx[01-02]"), view_of("NodeName=dgx01 State=IDLE Partitions=gpu\n"
                                                                             "NodeName=dgx02 State=IDLE Partitions=gpu\n", ""))
    assert plan.waves == [[Group(("dgx01", "dgx02"), ("dgx01", "dgx02"))]]


# ---------------------------------------------------------------- running a batch (a real shell)


def test_batch_script_runs_lines_in_parallel_and_reports_each(tmp_path: Path) -> None:
    lines = ["echo one; echo err >&2; exit 3", "printf 'no newline'", "sleep 1; echo slow"]
    script = batch_script(lines).replace("/tmp/reconciler-nccl.", f"{tmp_path}/reconciler-nccl.")
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    runs = parse_batch(proc.stdout, 3)
    assert [(r.output, r.rc) for r in runs] == [("one\nerr\n", 3), ("no newline\n", 0), ("slow\n", 0)]
    assert 0.9 < runs[2].seconds < 5 and runs[0].seconds < 0.9  # measured per line, run side by side
    assert not list(tmp_path.iterdir())  # the work directory is removed


def test_parse_batch_of_a_cut_output() -> None:
    assert parse_batch("", 2) == [StepRun("", None, 0.0), StepRun("", None, 0.0)]


# ---------------------------------------------------------------- judging real outputs


def rank0(job: str, host: str) -> str:
    return f"# reconciler: job {job} step 0 rank 0 on {host}\n"


def test_healthy_run_passes_with_value_job_and_gpu_seconds() -> None:
    [result] = judge_step(nightly(), Group(("dgx01",), ("dgx01",)), StepRun(rank0("77", "dgx01") + HEALTHY, 0, 12.5),
                          lambda _: [])
    assert result.ok and result.status == "PASS" and result.job_id == "77"
    assert result.message == "all_reduce busbw 363.5 GB/s at >= 1 GiB (min 330)"
    # the mean over rows >= 1 GiB of the lower of out-of-place and in-place busbw
    assert result.value == pytest.approx((359.27 + 362.99 + 365.09 + 366.70) / 4)
    assert result.gpu_seconds == pytest.approx(8 * 12.5)  # 1 node x 8 tasks x 1 GPU x 12.5 s
    assert result.details[:2] == ["job 77 step 0: rank 0 on dgx01", "nccl-tests ranks on vm"]


def test_degraded_run_fails_with_the_drain_wording() -> None:
    [result] = judge_step(nightly(), Group(("dgx02",), ("dgx02",)), StepRun(rank0("78", "dgx02") + DEGRADED, 0, 3.0),
                          lambda _: [])
    assert result.failed and result.message == "nccl all_reduce busbw 118.6 < 330 GB/s"
    assert result.value == pytest.approx(120.0, abs=0.1)


def test_allocation_refused_is_an_error_not_a_failure() -> None:
    output = ("srun: Required node not available (down, drained or reserved)\n"
              "srun: error: Unable to allocate resources: Requested nodes are busy\n")
    [result] = judge_step(nightly(), Group(("dgx02",), ("dgx02",)), StepRun(output, 1, 60.2), lambda _: [])
    assert result.error and not result.failed and result.gpu_seconds == 0.0
    assert result.message == "not run: srun: error: Unable to allocate resources: Requested nodes are busy"


def test_a_hung_run_killed_by_timeout_fails() -> None:
    cut = HEALTHY[: HEALTHY.index("  268435456")]
    [result] = judge_step(nightly(timeout="2m"), Group(("dgx01",), ("dgx01",)), StepRun(rank0("9", "dgx01") + cut, 124, 180),
                          lambda _: [])
    assert result.failed and result.message.startswith("nccl timed out after 2m")


def test_pairs_split_gpu_seconds_and_judge_each_node_with_its_own_history() -> None:
    check = nightly(mode="pairs", thresholds={"min_busbw": 100, "at_size": "1G", "regression_pct": 10})
    history = {"dgx01": [363.0, 364.0, 362.0], "dgx02": [420.0, 421.0, 419.0]}
    results = judge_step(check, Group(("dgx01", "dgx02"), ("dgx01", "dgx02")),
                         StepRun(rank0("5", "dgx01") + HEALTHY, 0, 10.0), lambda node: history[node])
    assert [r.ok for r in results] == [True, False]  # 363.5 is > 10% below dgx02's median 420
    assert "below its median 420.0 GB/s of the last 3 runs" in results[1].message
    assert [r.gpu_seconds for r in results] == [pytest.approx(80.0), pytest.approx(80.0)]  # 2 x 8 GPUs x 10 s / 2
