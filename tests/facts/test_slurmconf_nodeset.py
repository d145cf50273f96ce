"""The slurm.conf reader's NodeSet: by Feature= (read under its alias `features`) or by Nodes=."""

from __future__ import annotations

from reconciler.facts.slurmconf import meaning, parse_text

CONF = """\
NodeName=gpu[01-02] Feature=a100,ib CPUs=8
NodeName=cpu01 Feature=ib CPUs=4
NodeSet=gpus Feature=a100
NodeSet=fixed Nodes=cpu01
PartitionName=gpu Nodes=gpus
PartitionName=cpu Nodes=fixed
"""


def test_nodeset_by_feature_names_the_nodes_with_it() -> None:
    lines, _, errors = parse_text(CONF, "slurm.conf")
    assert errors == []
    seen = meaning(lines)
    assert seen.partitions["gpu"]["nodes"] == "gpu01,gpu02"
    assert seen.partitions["cpu"]["nodes"] == "cpu01"
