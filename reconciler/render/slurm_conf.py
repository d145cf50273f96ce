"""Render slurm.conf: one file, byte-identical on every node."""

from __future__ import annotations

from reconciler.common import hostlist
from reconciler.model import Cluster, NodeSet, Partition
from reconciler.render.common import SlurmValue, header, key_values, slurm_value
from reconciler.render.configless import ctld_parameters


def _global_params(cluster: Cluster) -> list[tuple[str, SlurmValue]]:
    pairs: list[tuple[str, SlurmValue]] = [("ClusterName", cluster.name)]
    pairs += [("SlurmctldHost", host) for host in cluster.controllers]
    params = cluster.slurm_conf.items()
    if cluster.mode == "configless":  # merged into the admin's SlurmctldParameters, or added after the others
        at = next((i for i, (k, _) in enumerate(params) if k.lower() == "slurmctldparameters"), None)
        if at is None:
            params.append(("SlurmctldParameters", ctld_parameters(None)))
        else:
            params[at] = (params[at][0], ctld_parameters(params[at][1]))
    pairs += params
    pairs += [("Prolog", cluster.prolog), ("Epilog", cluster.epilog)]
    if cluster.health_check:
        check = cluster.health_check
        pairs += [("HealthCheckProgram", check.program), ("HealthCheckInterval", check.interval),
                  ("HealthCheckNodeState", check.node_state)]
    return pairs


def gres_spec(node_set: NodeSet) -> str | None:
    """The `Gres=` value of a node set, e.g. `gpu:h200:8`."""
    if node_set.gpus is None:
        return None
    gpus = node_set.gpus
    return f"gpu:{gpus.type}:{gpus.count}" if gpus.type else f"gpu:{gpus.count}"


def node_line(node_set: NodeSet) -> str:
    """A `NodeName=` line for a node set."""
    pairs: list[tuple[str, SlurmValue]] = [
        ("NodeName", hostlist.compress(hostlist.expand(node_set.nodes))),
        ("CPUs", node_set.cpus),
        ("Boards", node_set.boards),
        ("Sockets", node_set.sockets),
        ("CoresPerSocket", node_set.cores_per_socket),
        ("ThreadsPerCore", node_set.threads_per_core),
        ("RealMemory", node_set.real_memory),
        ("Features", ",".join(node_set.features) or None),
        ("Gres", gres_spec(node_set)),
        ("Weight", node_set.weight),
    ]
    pairs += sorted(node_set.params.items())
    pairs.append(("State", node_set.state))
    return key_values(pairs)


def partition_line(part: Partition) -> str:
    """A `PartitionName=` line."""
    pairs: list[tuple[str, SlurmValue]] = [
        ("PartitionName", part.name),
        ("Nodes", hostlist.compress(hostlist.expand(part.nodes)) if part.nodes else None),
        ("Default", None if part.default is None else part.default),
        ("MaxTime", part.max_time),
    ]
    pairs += sorted(part.params.items())
    pairs.append(("State", part.state))
    return key_values(pairs)


def render_slurm_conf(cluster: Cluster, source: str) -> str:
    """Render slurm.conf for the cluster."""
    lines = [header("slurm.conf", source)]
    lines += [f"{key}={slurm_value(value)}" for key, value in _global_params(cluster) if value is not None]
    lines.append("\n# Nodes")
    lines += [node_line(s) for s in cluster.node_sets]
    lines.append("\n# Partitions")
    lines += [partition_line(p) for p in cluster.partitions]
    if cluster.down_nodes:
        lines.append("")
        lines += [key_values([("DownNodes", hostlist.compress(hostlist.expand(d.nodes))), ("State", d.state),
                              ("Reason", d.reason)]) for d in cluster.down_nodes]
    return "\n".join(lines) + "\n"
