"""The consequences of a slurm.conf/gres.conf/cgroup.conf change follow the one reader (reconciler.facts.slurmconf):
continuation lines, comments, key case, NodeName=DEFAULT and Include mean to them what they mean to Slurm."""

from __future__ import annotations

import pytest

from reconciler.drivers.slurm_consequences import (
    conf_file_consequence,
    node_definition_changed,
    slurm_conf_consequence,
)
from reconciler.facts.slurmconf import same_meaning

CONF = ("ClusterName=c\nSlurmdPort=6818\nGresTypes=gpu\n"
        "NodeName=gpu[01-02] CPUs=16 Gres=gpu:8 State=UNKNOWN\nPartitionName=debug Nodes=gpu[01-02] MaxTime=INFINITE\n")

# Each means CONF to Slurm: the plan must not claim a reconfigure or a restart for it.
SAME = {
    "key case": CONF.replace("SlurmdPort", "slurmdport").replace("CPUs=", "cpus="),
    "continued line": CONF.replace("CPUs=16 ", "CPUs=16 \\\n    "),
    "comments": "# the cluster\n" + CONF.replace("GresTypes=gpu\n", "GresTypes=gpu   # GPUs only\n"),
    "NodeName=DEFAULT": CONF.replace("NodeName=gpu[01-02] CPUs=16 Gres=gpu:8",
                                     "NodeName=DEFAULT CPUs=16 Gres=gpu:8\nNodeName=gpu[01-02]"),
    "quoted value": CONF.replace("MaxTime=INFINITE", 'MaxTime="INFINITE"'),
}


def nothing(before: str, after: str, family: str) -> bool:
    """True when the change needs no step at all."""
    result = slurm_conf_consequence(before, after, family)
    return not (result.reconfigure or result.restart_slurmctld or result.restart_all_slurmd or result.reasons)


@pytest.mark.parametrize("case", sorted(SAME))
@pytest.mark.parametrize("family", ["22.05", "24.11"])
def test_a_text_that_means_the_same_needs_nothing(case: str, family: str) -> None:
    assert same_meaning(CONF, SAME[case])  # the reader's view, which the consequences follow
    assert nothing(CONF, SAME[case], family), slurm_conf_consequence(CONF, SAME[case], family)
    assert not node_definition_changed(CONF, SAME[case], "gpu01", family)


@pytest.mark.parametrize("family", ["22.05", "24.11"])
def test_a_change_behind_a_continuation_or_in_key_case_is_seen_and_named_as_written(family: str) -> None:
    continued = SAME["continued line"]
    assert node_definition_changed(continued, continued.replace("CPUs=16", "CPUs=32"), "gpu01", family)
    lower = SAME["key case"].replace("slurmdport=6818", "slurmdport=6828")
    result = slurm_conf_consequence(CONF, lower, family)
    assert (result.reconfigure, result.restart_all_slurmd) == (True, True)
    assert any(r.startswith("slurmdport changed") for r in result.reasons), result.reasons


@pytest.mark.parametrize("family", ["22.05", "24.11"])
def test_a_nodename_default_change_is_a_change_of_every_node_it_covers(family: str) -> None:
    before = SAME["NodeName=DEFAULT"]
    after = before.replace("NodeName=DEFAULT CPUs=16", "NodeName=DEFAULT CPUs=32")
    assert node_definition_changed(before, after, "gpu01", family)
    assert slurm_conf_consequence(before, after, family).reconfigure


def test_a_changed_include_is_a_change_and_an_unchanged_one_is_not() -> None:
    included = CONF + "Include nodes.conf\n"
    assert nothing(included, included + "\n# a comment\n", "24.11")
    result = slurm_conf_consequence(included, CONF + "include other.conf\n", "24.11")
    assert result.reconfigure, result


def test_a_node_file_slurm_cannot_read_restarts_both_daemons_and_says_why() -> None:
    result = slurm_conf_consequence(CONF + "garbage without pairs\n", CONF, "24.11")
    assert (result.reconfigure, result.restart_slurmctld, result.restart_all_slurmd) == (True, True, True)
    assert result.reasons == ["slurm.conf on the node is not readable as Slurm reads it (slurm.conf:6: not "
                              "key=value: 'garbage without pairs'): restarting slurmctld and every slurmd"]


def test_gres_and_cgroup_conf_follow_the_reader_too() -> None:
    gres = "AutoDetect=off\nNodeName=gpu[01-02] Name=gpu File=/dev/nvidia[0-7]\n"
    same = "autodetect=off   # no NVML here\nNodeName=gpu[01-02] \\\n  Name=gpu File=/dev/nvidia[0-7]\n"
    result = conf_file_consequence("gres.conf", gres, same, "gpu01", "24.11")
    assert not (result.reconfigure or result.restart_slurmd_here), result
    result = conf_file_consequence("cgroup.conf", "ConstrainCores=yes\n", "constraincores=yes # on\n", "gpu01", "22.05")
    assert not (result.reconfigure or result.restart_slurmd_here), result
    result = conf_file_consequence("cgroup.conf", "ConstrainCores=yes\nnot a pair\n", "ConstrainCores=yes\n",
                                   "gpu01", "22.05")
    assert (result.reconfigure, result.restart_slurmd_here) == (True, True)
    assert "cgroup.conf:2: not key=value" in result.reasons[0], result.reasons
