"""Consequences as data: merging, superseding, ordering and describing follow-up steps."""

from __future__ import annotations

from reconciler.drivers.step_order import ORDER_COMPUTE, ORDER_CONTROLLER, ORDER_MUNGE
from reconciler.engine.followups import DrainSteps, carried, command, followup_key, merge, service, waves

DRAIN = DrainSteps(run_on="ctl", jobs="squeue", drained="false", drain="drain", resume="resume")


def test_the_same_step_asked_twice_runs_once_with_both_reasons_after_the_later_phase() -> None:
    steps = merge([command("gpu01", "sysctl --system", 20, "90-nccl.conf changed"),
                   command("gpu01", "sysctl --system", 25, "91-net.conf changed"),
                   command("gpu02", "sysctl --system", 20, "90-nccl.conf changed")])
    assert [(s.node, s.phase) for s in steps] == [("gpu02", 20), ("gpu01", 25)]
    assert steps[1].reasons == ["90-nccl.conf changed", "91-net.conf changed"]


def test_a_restart_makes_a_reload_of_the_same_service_needless() -> None:
    steps = merge([service("gpu01", "reload", "nfs-server", 10, "exports changed"),
                   service("gpu01", "restart", "nfs-server", 10, "nfs.conf changed"),
                   service("gpu02", "reload", "nfs-server", 10, "exports changed")])
    assert sorted((s.node, s.kind) for s in steps) == [("gpu01", "restart"), ("gpu02", "reload")]
    assert next(s for s in steps if s.node == "gpu01").reasons == ["nfs.conf changed", "exports changed"]


def test_supersedes_drops_the_named_step() -> None:
    restart = service("ctl", "restart", "slurmctld", 30, "SlurmctldPort changed", order=ORDER_CONTROLLER)
    restart.supersedes = [followup_key("ctl", "command", "scontrol reconfigure")]
    steps = merge([command("ctl", "scontrol reconfigure", 30, "topology.conf changed"), restart])
    assert [(s.kind, s.target) for s in steps] == [("restart", "slurmctld")]


def test_waves_run_munge_before_the_controller_before_compute_nodes() -> None:
    steps = merge([service(n, "restart", "slurmd", 30, "key", order=ORDER_COMPUTE, rolling=True)
                   for n in ("gpu01", "gpu02")]
                  + [service(n, "restart", "munge", 30, "key", order=ORDER_MUNGE) for n in ("ctl", "gpu01", "gpu02")]
                  + [service("ctl", "restart", "slurmctld", 30, "key", order=ORDER_CONTROLLER)])
    assert [[(s.node, s.target) for s in wave] for wave in waves(steps, 30)] == [
        [("ctl", "munge"), ("gpu01", "munge"), ("gpu02", "munge")],
        [("ctl", "slurmctld")],
        [("gpu01", "slurmd"), ("gpu02", "slurmd")]]
    assert waves(steps, 20) == []


def test_describe_folds_nodes_and_names_jobs_to_drain() -> None:
    steps = merge([service(f"gpu{i:02d}", "restart", "slurmd", 30, "plugstack changed", rolling=True,
                           drain=DRAIN, jobs=["17"] if i == 3 else []) for i in range(1, 9)]
                  + [command(f"gpu{i:02d}", "sysctl --system", 20, "sysctl") for i in range(1, 9)])
    from reconciler.engine.followups import describe
    assert describe(steps) == [
        "runs `sysctl --system` on gpu[01-08] (8 nodes)",
        "restarts slurmd on gpu[01-08] (8 nodes); 1 has running jobs and will be drained first: gpu03 (jobs 17)"]


def test_describe_says_a_step_without_a_drain_keeps_the_jobs_and_names_the_nodes_a_step_protects() -> None:
    from reconciler.engine.followups import describe
    restart = service("gpu03", "restart", "slurmd", 30, "SlurmdPort changed", rolling=True, jobs=["17"])
    ctld = service("ctl", "restart", "slurmctld", 30, "node CPUs changed", order=ORDER_CONTROLLER)
    ctld.protect = {"gpu01": DRAIN, "gpu02": DRAIN}
    assert describe(merge([restart, ctld])) == [
        "restarts slurmctld on ctl; first drains gpu[01-02] and waits (at most --drain-timeout) until no job runs "
        "there, since the step would end those jobs; resumes them after it",
        "restarts slurmd on gpu03; in place on gpu03, not drained: their running jobs keep running"]


def test_steps_left_undone_are_carried_to_reachable_nodes_only() -> None:
    pending = [service(n, "restart", "slurmd", 30, "gres.conf changed", jobs=["5"]) for n in ("gpu01", "gpu02")]
    again = carried(pending, {"gpu02", "ctl"})
    assert [(s.node, s.jobs) for s in again] == [("gpu02", [])]
    assert again[0].reasons[-1] == "left undone by an interrupted apply"
