"""Desired-state schema of `cluster:`: the Slurm cluster (controllers, node sets, partitions, down nodes, health
check, files or configless), with the parameter files of reconciler/model/slurmconf.py.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from reconciler.model import netnames, values
from reconciler.model.base import AbsPath, Hostlist, SlurmAbsPath, SlurmScalar, Strict, absolute, hostlist_expr
from reconciler.model.bounds import U16_MAX, U32_MAX, count
from reconciler.model.slurmconf import CgroupConf, GresConf, SlurmConfParams
from reconciler.model.values import GresWord, SlurmWord

SLURM_VERSION_FAMILIES = ("20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11",
                          "26.05")


class GPUs(Strict):
    """GPUs of each node in a node set."""

    count: count(1, 128)  # type: ignore[valid-type]
    type: GresWord | None = Field(default=None, description="GRES type, e.g. h100, h200, a100")


class NodeSet(Strict):
    """A `NodeName=` line: nodes with identical hardware."""

    nodes: Hostlist
    cpus: int | None = Field(default=None, ge=1, le=U16_MAX, alias="CPUs")
    boards: int | None = Field(default=None, ge=1, le=U16_MAX, alias="Boards")
    sockets: int | None = Field(default=None, ge=1, le=U16_MAX, alias="Sockets")
    cores_per_socket: int | None = Field(default=None, ge=1, le=U16_MAX, alias="CoresPerSocket")
    threads_per_core: int | None = Field(default=None, ge=1, le=U16_MAX, alias="ThreadsPerCore")
    real_memory: int | None = Field(default=None, ge=1, alias="RealMemory", description="MiB")
    features: list[SlurmWord] = Field(default_factory=list, alias="Features")
    gpus: GPUs | None = None
    weight: int | None = Field(default=None, ge=0, le=U32_MAX, alias="Weight")
    state: SlurmWord | None = Field(default=None, alias="State", description="e.g. CLOUD, FUTURE")
    params: dict[str, SlurmScalar] = Field(default_factory=dict, description="Other NodeName= parameters")

    _check_nodes = field_validator("nodes")(lambda cls, v: hostlist_expr(v))
    _check_params = field_validator("params")(lambda cls, v: values.check_slurm_mapping(v))


class Partition(Strict):
    """A `PartitionName=` line."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    nodes: Hostlist | None = Field(default=None, description="None: a partition with no nodes (yet)")
    default: bool | None = Field(default=None, description="Default=YES (true) or Default=NO (false)")
    max_time: str | None = Field(default=None, alias="MaxTime", description="UNLIMITED or [d-]h:m:s / minutes")
    state: Literal["UP", "DOWN", "DRAIN", "INACTIVE"] | None = Field(default=None, alias="State")
    params: dict[str, SlurmScalar] = Field(default_factory=dict, description="Other PartitionName= parameters")

    _check_nodes = field_validator("nodes")(lambda cls, v: v if v is None else hostlist_expr(v))
    _check_params = field_validator("params")(lambda cls, v: values.check_slurm_mapping(v))

    @field_validator("max_time")
    @classmethod
    def _max_time(cls, value: str | None) -> str | None:
        if value is None:
            return value
        text = str(value)
        if text.upper() in ("UNLIMITED", "INFINITE") or re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", text):
            return text
        raise ValueError(f"MaxTime must be UNLIMITED, minutes, or [days-]hours:minutes:seconds, got {text!r}")


class DownNodes(Strict):
    """A `DownNodes=` line: nodes Slurm starts in a down state, with the reason."""

    nodes: Hostlist
    state: str | None = Field(default=None, alias="State", description="DOWN, DRAIN, FAIL, FAILING or FUTURE")
    reason: str | None = Field(default=None, alias="Reason")

    _check_nodes = field_validator("nodes")(lambda cls, v: hostlist_expr(v))


class HealthCheck(Strict):
    """Slurm's own HealthCheckProgram (e.g. NHC)."""

    program: SlurmAbsPath
    interval: int = Field(default=300, ge=0, le=U16_MAX, description="seconds")
    node_state: SlurmWord | None = Field(default=None, description="e.g. ANY, IDLE, CYCLE")

    _abs = field_validator("program")(lambda cls, v: absolute(v))


class Cluster(Strict):
    """The Slurm cluster: slurm.conf, gres.conf and cgroup.conf in one place."""

    name: str = Field(pattern=r"^[a-z0-9_-]+$", description="ClusterName (lower case, as Slurm wants)")
    slurm_version: Literal[SLURM_VERSION_FAMILIES] = Field(  # type: ignore[valid-type]
        description="Slurm version family; decides reconfigure vs restart"
    )
    controllers: list[str] = Field(min_length=1, description="SlurmctldHost entries, primary first: a node "
                                   "name, or name(address)")
    slurm_conf: SlurmConfParams = Field(default_factory=SlurmConfParams)
    node_sets: list[NodeSet] = Field(default_factory=list)
    partitions: list[Partition] = Field(default_factory=list)
    down_nodes: list[DownNodes] = Field(default_factory=list)
    gres: GresConf | None = None
    cgroup: CgroupConf | None = None
    prolog: AbsPath | None = None
    epilog: AbsPath | None = None
    _slurm_paths = field_validator("prolog", "epilog")(lambda cls, v: values.slurm_value(v))
    health_check: HealthCheck | None = None
    config_dir: AbsPath = Field(default="/etc/slurm", description="Where slurm.conf lives on every node")
    mode: Literal["files", "configless"] = Field(
        default="files", description="files: slurm.conf, gres.conf and cgroup.conf on every Slurm node; "
        "configless: only on the controllers and nodes outside the node sets (SlurmctldParameters gets "
        "enable_configless), slurmd on the node sets' nodes is started with --conf-server (a systemd "
        "drop-in or a supervisord program) and any local slurm.conf there is removed")

    _abs = field_validator("prolog", "epilog", "config_dir")(lambda cls, v: v if v is None else absolute(v))

    @field_validator("controllers")
    @classmethod
    def _controllers(cls, value: list[str]) -> list[str]:
        for entry in value:
            match = re.fullmatch(r"([^()]+)(?:\(([^()]+)\))?", entry)
            if not match:
                raise ValueError(f"a controller is a node name or name(address), got {entry!r}")
            try:
                netnames.node_name(match.group(1))
                if match.group(2):
                    netnames.host(match.group(2))
            except ValueError as exc:
                raise ValueError(f"a controller is a node name or name(address): {exc}") from None
        return value

    @property
    def controller_names(self) -> list[str]:
        """The controllers' node names (any `(address)` removed), primary first."""
        return [entry.split("(", 1)[0] for entry in self.controllers]
