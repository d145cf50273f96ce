"""Desired-state schema of the Slurm parameter files: slurm.conf parameters written as keys, gres.conf and
cgroup.conf (`cluster.slurm_conf`, `cluster.gres`, `cluster.cgroup`), checked against reconciler/params.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from reconciler import params as slurm_params
from reconciler.model import values
from reconciler.model.base import Hostlist, SlurmScalar, Strict, hostlist_expr
from reconciler.model.values import GresWord, SlurmStr, SlurmWord

# slurm.conf keys that have a schema key of their own (or are lines of their own, not parameters).
_OWN_KEYS = {"nodename": "cluster.node_sets", "partitionname": "cluster.partitions", "clustername": "cluster.name",
             "slurmctldhost": "cluster.controllers", "controlmachine": "cluster.controllers",
             "controladdr": "cluster.controllers (name(address))", "backupcontroller": "cluster.controllers",
             "backupaddr": "cluster.controllers (name(address))", "nodeset": "the partitions' node lists",
             "downnodes": "node_sets[].State", "include": "(files are merged into one)"}


def _param_key(file: str, scope: str) -> Any:
    """An Annotated str type: a key of that file and scope, known to the parameter tables (any case)."""
    def check(key: str) -> str:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.]*", key):
            raise ValueError(f"not a {file} key: {key!r}")
        if file == "slurm.conf" and scope == "global" and key.lower() in _OWN_KEYS:
            raise ValueError(f"{key} is not set here: use {_OWN_KEYS[key.lower()]}")
        slurm_params.resolve(file, key, None, scope)  # UnknownParameter (a ValueError) says "did you mean"
        return key
    return Annotated[str, AfterValidator(check)]


SlurmConfKey = _param_key("slurm.conf", "global")
CgroupConfKey = _param_key("cgroup.conf", "global")


class ParamMap(BaseModel):
    """Parameters written directly as keys, in the order written; `extra` for keys the tables do not know."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    FILE: ClassVar[str] = ""
    extra: dict[str, SlurmScalar] = Field(
        default_factory=dict, description="Site-specific plugin keys that no Slurm release documents")

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict):
            seen: dict[str, str] = {}
            for key in data:
                if key != "extra" and str(key).lower() in seen:
                    raise ValueError(f"{key} and {seen[str(key).lower()]} are the same parameter (keys are "
                                     f"case-insensitive, as in Slurm)")
                seen[str(key).lower()] = str(key)
        return data

    @field_validator("extra")
    @classmethod
    def _extra_keys(cls, value: dict[str, SlurmScalar]) -> dict[str, SlurmScalar]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.]*", key):
                raise ValueError(f"not a {cls.FILE} key: {key!r}")
            if slurm_params.lookup(cls.FILE, key) is not None:
                raise ValueError(f"{key} is a known {cls.FILE} parameter: set it directly, not under extra")
        values.check_slurm_mapping(value)
        return value

    def written(self) -> dict[str, SlurmScalar]:
        """The known parameters as written (original spelling), in the order written."""
        return dict(self.__pydantic_extra__ or {})

    def items(self) -> list[tuple[str, SlurmScalar]]:
        """Every parameter to render: known ones in Slurm's spelling and the order written, then `extra` sorted."""
        known = [(_canonical(self.FILE, key), value) for key, value in self.written().items()]
        return known + sorted(self.extra.items())

    def get(self, name: str, default: SlurmScalar | None = None) -> SlurmScalar | None:
        """A parameter's value by name (any case), or the default."""
        for key, value in self.items():
            if key.lower() == name.lower():
                return value
        return default


def _canonical(file: str, key: str) -> str:
    param = slurm_params.lookup(file, key)
    return param.name if param else key


class SlurmConfParams(ParamMap):
    """Global slurm.conf parameters, written as keys (`MessageTimeout: 25`); nothing is rendered unless set."""

    FILE: ClassVar[str] = "slurm.conf"
    __pydantic_extra__: dict[SlurmConfKey, SlurmScalar] = Field(init=False)  # type: ignore[valid-type]


class GresLine(Strict):
    """An explicit gres.conf line."""

    nodes: Hostlist | None = None
    name: GresWord = "gpu"
    type: GresWord | None = None
    file: SlurmStr | None = Field(default=None, description="Device files, e.g. /dev/nvidia[0-7]")
    count: int | SlurmWord | None = Field(default=None, description="e.g. 8, or 10G for shards/MPS")
    cores: SlurmStr | None = None
    links: SlurmStr | None = None
    params: dict[str, SlurmScalar] = Field(default_factory=dict, description="Other gres.conf line parameters")

    _check_params = field_validator("params")(lambda cls, v: values.check_slurm_mapping(v))

    _check_nodes = field_validator("nodes")(lambda cls, v: v if v is None else hostlist_expr(v))


class GresConf(Strict):
    """gres.conf: AutoDetect (e.g. nvml) and/or explicit lines."""

    auto_detect: Literal["nvml", "nvidia", "rsmi", "oneapi", "nrt", "off"] | None = None
    lines: list[GresLine] = Field(default_factory=list)


class CgroupConf(ParamMap):
    """cgroup.conf parameters, written as keys (`ConstrainCores: true`), rendered in the order written."""

    FILE: ClassVar[str] = "cgroup.conf"
    __pydantic_extra__: dict[CgroupConfKey, SlurmScalar] = Field(init=False)  # type: ignore[valid-type]

    _check_extra = field_validator("extra")(lambda cls, v: values.check_slurm_mapping(v))
