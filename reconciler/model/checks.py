"""Desired-state schema of `checks:`: node checks (GPUs, InfiniBand, mounts, services, DCGM, NHC) and NCCL runs,
with their schedules and thresholds.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, field_validator, model_validator

from reconciler.model.base import AbsPath, Hostlist, Strict, hostlist_expr, parse_size
from reconciler.model.bounds import CheckInterval, CheckTimeout, count, duration_between
from reconciler.model.fleet import FleetRules
from reconciler.model.values import NameToken


class PcieExpectation(Strict):
    """The PCIe link every GPU must have trained to."""

    gen: int | None = Field(default=None, ge=1, le=7, description="Minimum PCIe generation, e.g. 5")
    width: int | None = Field(default=None, ge=1, le=32, description="Minimum lanes, e.g. 16")


_Xid = Annotated[int, Field(ge=1, le=999)]


class GpuExpectation(Strict):
    """Expected GPUs as nvidia-smi reports them, and their health."""

    count: count(0, 128)  # type: ignore[valid-type]
    model: str | None = Field(default=None, description="Substring of the product name, e.g. H200")
    driver: str | None = Field(default=None, description="Exact or prefix, e.g. 580.")
    health: bool = Field(default=True, description="Uncorrected ECC errors, row remapping pending or failed, "
                         "retired pages pending, hardware clock slowdowns and fatal XIDs fail the node")
    max_temperature: int | None = Field(default=None, ge=1, le=150, description="Celsius, per GPU")
    pcie: PcieExpectation | None = None
    ecc: bool = Field(default=False, description="ECC mode must be enabled on every GPU")
    nvlinks: int | None = Field(default=None, ge=0, le=64, description="Active NVLink links per GPU, e.g. 18")
    nvlink_speed: float | None = Field(default=None, gt=0, le=10000, description="Minimum GB/s of each active link")
    fabric_manager: bool = Field(default=False, description="NVSwitch system: nvidia-fabricmanager running and "
                                 "every GPU's fabric registration completed")
    xid_ignore: list[_Xid] = Field(default_factory=list, description="XIDs never reported nor drained on")


class IbExpectation(Strict):
    """InfiniBand/RoCE ports a node must have up (ACTIVE, LinkUp), from /sys/class/infiniband."""

    ports: int = Field(ge=0, le=64, description="How many ports must be up (of DEVICES when given)")
    rate: float | None = Field(default=None, gt=0, le=10000, description="Minimum Gb/s of each port, e.g. 400")
    devices: list[NameToken] = Field(default_factory=list, description="Only these HCAs, e.g. [mlx5_0, mlx5_1]")
    link_layer: Literal["InfiniBand", "Ethernet"] | None = Field(default=None, description="Ethernet for RoCE")


class DcgmCheck(Strict):
    """DCGM's diagnostic (`dcgmi diag -r LEVEL`) when dcgmi is installed; it loads the GPUs, so not every time."""

    level: int = Field(default=1, ge=1, le=4)
    on_schedule: bool = Field(default=False, description="Every interval too, not only to retest a drained node")
    timeout: CheckTimeout = "15m"  # type: ignore[valid-type]


class NhcCheck(Strict):
    """LBNL NHC, run with the site's own rules; its verdict is one more item."""

    command: str = Field(default="nhc", pattern=r"^/?[A-Za-z0-9_./-]+$")
    timeout: CheckTimeout = "5m"  # type: ignore[valid-type]


class NodeCheck(Strict):
    """An NHC-style check run over SSH on each node."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    nodes: Hostlist
    interval: CheckInterval = "10m"  # type: ignore[valid-type]
    gpus: GpuExpectation | None = None
    mounts: list[AbsPath] = Field(default_factory=list, description="Must be mounted and writable")
    services: list[NameToken] = Field(default_factory=list, description="e.g. munge, slurmd")
    images: bool = Field(default=False, description="Enroot images of this repo must be present")
    slurm_state: list[NameToken] = Field(default_factory=list, description="Acceptable Slurm states, e.g. IDLE, MIXED")
    munge: bool = Field(default=False, description="A credential made on this node (`munge -n`) decodes on the "
                        "controller (`unmunge`) and one made there decodes here: the munge keys agree")
    infiniband: IbExpectation | None = None
    dcgm: DcgmCheck | None = None
    nhc: NhcCheck | None = None
    drain_on_fail: bool = True

    _check_nodes = field_validator("nodes")(lambda cls, v: hostlist_expr(v))

    @field_validator("dcgm", "nhc", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        """`nhc: true` / `dcgm: true` take the defaults; false leaves the item out."""
        if value is True:
            return {}
        return None if value is False else value


_SCHEDULE_INTERVAL: TypeAdapter[Any] = TypeAdapter(duration_between(1, 30 * 86400))


def _nccl_size(value: str | int) -> int:
    size = parse_size(value)
    if not 1 <= size <= 1 << 40:
        raise ValueError(f"a message size between 1 byte and 1T, got {value!r}")
    return size


class NcclThresholds(Strict):
    """What an NCCL run must reach to pass."""

    min_busbw: float | None = Field(default=None, ge=0, le=100000, description="GB/s, for every size >= at_size")
    at_size: str | int = "1G"
    min_avg_busbw: float | None = Field(default=None, ge=0, le=100000, description="GB/s, 'Avg bus bandwidth'")
    max_wrong: int = Field(default=0, ge=0)
    regression_pct: float | None = Field(default=None, gt=0, lt=100,
                                         description="Flag a drop this far below the node's median")
    regression_window: int = Field(default=10, ge=3, le=10000)

    _size = field_validator("at_size")(lambda cls, v: (_nccl_size(v), v)[1])


class NcclCheck(Strict):
    """A periodic nccl-tests run through Slurm, or (mode local) run by each node itself over SSH, without Slurm."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    binary: str = Field(default="all_reduce_perf", description="nccl-tests binary name or absolute path")
    # One plateau size, few iterations, no validation: a quarter of a full sweep's GPU-seconds within 5 % of its
    # peak busbw (bench/README.md, section NCCL); add "-c", "1" for a run that also counts wrong elements.
    args: list[str] = Field(default_factory=lambda: ["-b", "4G", "-e", "4G", "-n", "5", "-w", "1", "-c", "0",
                                                     "-g", "1"])
    mode: Literal["single-node", "pairs", "partition", "local"] = Field(
        default="single-node", description="local: no srun; one process per node with -g ntasks_per_node x "
                                           "gpus_per_task, never drains")
    nodes: Hostlist | None = None
    partition: NameToken | None = None
    ntasks_per_node: int = Field(default=8, ge=1, le=1024)
    gpus_per_task: int = Field(default=1, ge=0, le=128)
    mpi: Literal["pmix", "pmi2", "none"] | None = "pmix"
    container_image: str | None = None
    container_mounts: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"not an environment variable name: {key!r}")
        return value
    env_profile: AbsPath | None = Field(default=None, description="Script sourced first, e.g. nccl-env-profile.sh")
    schedule: str | None = Field(default=None, description="'daily HH:MM' or an interval like 6h")
    timeout: CheckTimeout = "15m"  # type: ignore[valid-type]
    only_idle: bool = True
    drain_on_fail: bool = True
    thresholds: NcclThresholds = Field(default_factory=NcclThresholds)

    _check_nodes = field_validator("nodes")(lambda cls, v: v if v is None else hostlist_expr(v))

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is None or re.fullmatch(r"daily ([01]\d|2[0-3]):[0-5]\d", value):
            return value
        _SCHEDULE_INTERVAL.validate_python(value)
        return value

    @model_validator(mode="after")
    def _target(self) -> NcclCheck:
        if not self.nodes and not self.partition:
            raise ValueError("an NCCL check needs nodes or partition")
        if self.mode == "local" and self.container_image:
            raise ValueError("container_image needs srun (pyxis): not available in local mode")
        return self


class Checks(Strict):
    """Health checks: node checks and NCCL runs."""

    node: list[NodeCheck] = Field(default_factory=list)
    nccl: list[NcclCheck] = Field(default_factory=list)
    fleet: FleetRules = Field(default_factory=FleetRules, description="Every GPU's history and the RMA rules "
                              "(reconciler/model/fleet.py, docs/gpu-fleet.md)")
