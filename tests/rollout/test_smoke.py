"""The smoke job's pure parts: its command lines, its output's parsing, the nodes it can run on."""

from __future__ import annotations

import shlex
import subprocess

from reconciler.checks.slurm_view import SlurmView
from reconciler.checks.smoke import (
    SmokeSpec,
    container_failures,
    launch_script,
    parse_output,
    runnable,
    srun_words,
    step_script,
)
from reconciler.facts.models import SlurmNodeFact


def view(**states: str) -> SlurmView:
    """A Slurm view of nodes in these states (reason 'why' on drained ones)."""
    return SlurmView(nodes={n: SlurmNodeFact(name=n, state=s, reason="why" if "DRAIN" in s else None)
                            for n, s in states.items()})


def test_srun_runs_on_exactly_the_nodes_in_the_reservation() -> None:
    spec = SmokeSpec(nodes=["gpu01", "gpu02"], mounts=["/shared"], timeout=120, reservation="r1", partition="batch")
    words = srun_words(spec, ["gpu01", "gpu02", "gpu03"])
    assert words[:4] == ["timeout", "-k", "10", "120"]
    assert "--reservation=r1" in words and "--nodes=3" in words and "--nodelist=gpu[01-03]" in words
    assert "--ntasks-per-node=1" in words and "--partition=batch" in words and "--time=2" in words
    assert words[-3:-1] == ["sh", "-c"]
    image = srun_words(spec, ["gpu01"], image="docker://alpine")
    assert image[-4:-1] == ["--container-image=docker://alpine", "sh", "-c"]
    assert image[-1] == 'echo "reconciler-smoke-container OK $SLURMD_NODENAME"'



def test_launch_script_has_a_container_line_only_with_an_image() -> None:
    plain = launch_script(SmokeSpec(nodes=["a"]), ["a"])
    assert plain.count("srun ") == 1 and "reconciler-smoke-rc step" in plain
    both = launch_script(SmokeSpec(nodes=["a"], container_image="docker://x"), ["a"])
    assert both.count("srun ") == 2 and "reconciler-smoke-rc container" in both


def test_step_script_reports_a_missing_mount_and_passes_a_present_one(tmp_path) -> None:  # noqa: ANN001
    script = step_script(["/proc", str(tmp_path / "not mounted; $(echo pwned)")])
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 1
    failed, passed, _ = parse_output(out.stdout)
    assert list(failed.values()) == [f"{tmp_path / 'not mounted; $(echo pwned)'} is not mounted"]
    assert "$(echo pwned)" in out.stdout
    good = subprocess.run(["sh", "-c", step_script(["/proc"])], capture_output=True, text=True, check=False)
    assert good.returncode == 0 and parse_output(good.stdout)[1] == {shlex.split(good.stdout)[2]}


def test_parse_output_reads_per_node_lines_and_exit_statuses() -> None:
    output = ("reconciler-smoke OK gpu01\nsrun: error: gpu02: task 1: Exited with exit code 1\n"
              "reconciler-smoke FAIL gpu02: /shared is not mounted\nreconciler-smoke-rc step 1\n"
              "reconciler-smoke-rc container 0\n")
    failed, passed, rcs = parse_output(output)
    assert failed == {"gpu02": "/shared is not mounted"} and passed == {"gpu01"}
    assert rcs == {"step": 1, "container": 0}


def test_runnable_skips_drained_down_and_full_nodes() -> None:
    take, skipped = runnable(view(gpu01="IDLE", gpu02="MIXED", gpu03="ALLOCATED", gpu04="IDLE+DRAIN",
                                  gpu05="DOWN*"), ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "ctl"])
    assert take == ["gpu01", "gpu02"]
    assert skipped["gpu03"] == "fully allocated by running jobs"
    assert skipped["gpu04"].startswith("drained") and skipped["gpu05"].startswith("not responding")
    assert skipped["ctl"] == "not a Slurm node"


# What srun 22.05 printed on the testbed for `--container-image=/tmp/nope.sqsh` through the Pyxis stand-in (its
# messages are Pyxis' own words): every task's launch failed, and srun exited 0 all the same.
SRUN_CONTAINER_FAILED = """reconciler-smoke OK gpu01
reconciler-smoke OK gpu02
reconciler-smoke-rc step 0
slurmstepd-gpu02: error: pyxis: child failed with error code: 1
slurmstepd-gpu02: error: pyxis: printing enroot log file:
slurmstepd-gpu02: error: pyxis:     [ERROR] No such file or directory: /tmp/nope.sqsh
slurmstepd-gpu02: error: pyxis: couldn't start container
slurmstepd-gpu02: error: spank: required plugin pyxis-standin.so: user_init() failed with rc=-1
slurmstepd-gpu02: error: spank_user failed.
srun: error: task 1 launch failed: Slurmd could not execve job
reconciler-smoke-container OK gpu01
reconciler-smoke-rc container 0
"""


def test_a_container_that_did_not_start_is_named_with_the_image_despite_srun_exiting_0() -> None:
    failed = container_failures(SRUN_CONTAINER_FAILED, "/tmp/nope.sqsh", ["gpu01", "gpu02"])
    assert failed == {"gpu02": "container image /tmp/nope.sqsh did not start: "
                                "[ERROR] No such file or directory: /tmp/nope.sqsh"}
    quiet = SRUN_CONTAINER_FAILED.replace("reconciler-smoke-container OK gpu01\n", "")
    no_word = container_failures(quiet.replace("[ERROR]", "error:"), "img", ["gpu01"])
    assert no_word["gpu01"].startswith("container image img did not start: srun: error: task 1 launch failed")
    # The plain step's own errors (before its rc line) are not the container's.
    assert container_failures("srun: error: x\nreconciler-smoke-rc step 1\n", "img", ["a"]) == \
        {"a": "container image img did not start"}
