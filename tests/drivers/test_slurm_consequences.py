"""What slurm.conf, gres.conf and cgroup.conf changes need, per release family, as corrected by the table measured
on real 22.05 and 24.11 daemons (tests/params/test_observed_consequences_testbed.py; docs/slurm-parameters.md,
"Observed on the testbed"). Families before 23.11 follow 22.05, later ones 24.11."""

from __future__ import annotations

import pytest

from reconciler.drivers.slurm_consequences import (
    conf_file_consequence,
    node_definition_changed,
    slurm_conf_consequence,
)

CONF = ("ClusterName=c\nSlurmdPort=6818\nGresTypes=gpu\n"
        "NodeName=gpu[01-02] CPUs=16 Gres=gpu:8 State=UNKNOWN\nPartitionName=debug Nodes=gpu[01-02] MaxTime=INFINITE\n")
GRES = "AutoDetect=off\nNodeName=gpu[01-02] Name=gpu File=/dev/nvidia[0-7]\n"


def steps(before: str, after: str, family: str) -> tuple[bool, bool, bool]:
    """(reconfigure, restart slurmctld, restart every slurmd) of a slurm.conf change."""
    result = slurm_conf_consequence(before, after, family)
    return result.reconfigure, result.restart_slurmctld, result.restart_all_slurmd


@pytest.mark.parametrize("family", ["22.05", "23.11", "24.11"])
def test_slurmd_port_restarts_every_slurmd_after_reconfigure_not_slurmctld(family: str) -> None:
    """Claimed before: slurmctld, then every slurmd."""
    assert steps(CONF, CONF.replace("SlurmdPort=6818", "SlurmdPort=6828"), family) == (True, False, True)


@pytest.mark.parametrize(("family", "ctld"), [("22.05", True), ("23.02", True), ("23.11", False), ("24.11", False)])
def test_topology_plugin_needs_only_slurmctld_before_23_11(family: str, ctld: bool) -> None:
    """Claimed before: both daemons restarted before 23.11."""
    assert steps(CONF, CONF + "TopologyPlugin=topology/tree\n", family) == (True, ctld, False)


@pytest.mark.parametrize(("family", "restarts"), [("22.05", True), ("23.11", True), ("24.05", True),
                                                  ("24.11", False), ("25.11", False)])
def test_adding_or_removing_a_node_restarts_slurmctld_and_every_slurmd_before_24_11(family: str, restarts: bool) -> None:
    """Claimed before: slurmctld only on 22.05, a reconfigure from 23.11. slurm.conf.5 of 22.05-24.05 asks for
    slurmctld and every slurmd (all slurmds must know each node to forward messages); the FAQ says reconfigure
    from 24.11. tests/params/test_forwarding_testbed.py shows a slurmctld restart alone is not enough."""
    fewer = CONF.replace("gpu[01-02]", "gpu01")
    for before, after in ((fewer, CONF), (CONF, fewer)):
        result = slurm_conf_consequence(before, after, family)
        assert (result.reconfigure, result.restart_slurmctld, result.restart_all_slurmd) == (True, restarts, restarts)
        assert any("gpu02" in r and "restarts" in r for r in result.reasons) is restarts, result.reasons
        assert not node_definition_changed(before, after, "gpu01", family)


@pytest.mark.parametrize("family", ["22.05", "23.02", "23.11", "24.05"])
def test_node_cpus_and_gres_need_slurmctld_and_the_node_slurmd_before_24_11(family: str) -> None:
    """Claimed before: the node's slurmd only (22.05 kept the old definition in slurmctld); 23.11 and 24.05 took
    24.11's observation, but their slurm.conf.5 (NODE CONFIGURATION) still asks for slurmctld and slurmd restarts."""
    for after in (CONF.replace("CPUs=16", "CPUs=32"), CONF.replace("Gres=gpu:8", "Gres=gpu:4")):
        result = slurm_conf_consequence(CONF, after, family)
        assert (result.reconfigure, result.restart_slurmctld, result.restart_all_slurmd) == (True, True, False)
        assert any("needs a slurmctld restart" in r for r in result.reasons), result.reasons
        assert node_definition_changed(CONF, after, "gpu01", family)


@pytest.mark.parametrize("family", ["24.11", "25.11"])
def test_node_gres_is_a_reconfigure_and_cpus_a_drained_slurmd_restart_from_24_11(family: str) -> None:
    gres = CONF.replace("Gres=gpu:8", "Gres=gpu:4")
    assert steps(CONF, gres, family) == (True, False, False)
    assert not node_definition_changed(CONF, gres, "gpu01", family)  # was: slurmd restart
    cpus = CONF.replace("CPUs=16", "CPUs=32")
    assert steps(CONF, cpus, family) == (True, False, False)
    assert node_definition_changed(CONF, cpus, "gpu01", family)  # kept: the job dies however it is applied


@pytest.mark.parametrize(("family", "slurmd"), [("22.05", True), ("23.02", True), ("23.11", False), ("24.11", False)])
def test_a_gres_conf_change_restarts_the_node_slurmd_before_23_11_only(family: str, slurmd: bool) -> None:
    """Claimed before: any gres.conf change restarts slurmd, every family."""
    result = conf_file_consequence("gres.conf", GRES, GRES.replace("[0-7]", "[0-3]"), "gpu01", family)
    assert (result.reconfigure, result.restart_slurmctld, result.restart_slurmd_here) == (True, False, slurmd)


@pytest.mark.parametrize("family", ["22.05", "24.11"])
def test_gres_conf_lines_of_other_nodes_do_not_restart_this_node(family: str) -> None:
    """Adding gpu02 to a line changes nothing gpu01's slurmd reads (the add-a-node case on 22.05)."""
    fewer = GRES.replace("gpu[01-02]", "gpu01")
    for node in ("gpu01", "gpu03"):
        result = conf_file_consequence("gres.conf", fewer, GRES, node, family)
        assert not (result.reconfigure or result.restart_slurmctld or result.restart_slurmd_here), (node, result)
    assert conf_file_consequence("gres.conf", fewer, GRES, "gpu02", family).reconfigure


def test_gres_conf_keys_the_man_page_restarts_for_still_restart_both() -> None:
    """24.11's man page: a Type change needs slurmctld and slurmd restarted, unless AutoDetect finds the GPUs."""
    typed = GRES.replace("Name=gpu ", "Name=gpu Type=h100 ")
    result = conf_file_consequence("gres.conf", GRES, typed, "gpu01", "24.11")
    assert (result.restart_slurmctld, result.restart_slurmd_here) == (True, True)


@pytest.mark.parametrize("family", ["22.05", "23.11", "24.11"])
def test_a_cgroup_conf_change_is_a_reconfigure_as_its_man_page_says(family: str) -> None:
    """Claimed before: a slurmd restart. cgroup.conf.5 (every release): changes take effect on `scontrol reconfigure`
    unless a key says otherwise, none does; slurmd 22.05's reconfigure re-reads it (cgroup_conf_reinit). Not
    observable on the testbed (no cgroup plugin), so the documents decide."""
    for key in ("AllowedRAMSpace=90", "CgroupPlugin=cgroup/v2", "ConstrainCores=yes"):
        result = conf_file_consequence("cgroup.conf", "CgroupPlugin=autodetect\n",
                                       f"CgroupPlugin=autodetect\n{key}\n", "gpu01", family)
        assert (result.reconfigure, result.restart_slurmctld, result.restart_slurmd_here) == (True, False, False)
    assert conf_file_consequence("cgroup.conf", "ConstrainCores=yes\n", "ConstrainCores=yes\n", "gpu01",
                                 family).reasons == []
