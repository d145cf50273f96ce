"""Desired-state schema of `packages:`: per node set, each package present, absent, at a version or a glob."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from reconciler.common import versions
from reconciler.model.upgrade import Needs

# Debian names are [a-z0-9][a-z0-9+.-]+, rpm names also take capitals and `_`; never a leading `-` (an option).
PACKAGE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
KEYWORDS = ("present", "absent")


class PackageSpec(BaseModel):
    """One package: present, absent, an exact version or a version glob; held or not; what a change needs."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    version: str = Field(default="present", description="present, absent, an exact version (2.10-3) or a glob "
                         "(570.86.*: the newest matching one the repositories offer)")
    hold: bool | None = Field(default=None, description="true: apt-mark hold / dnf versionlock; false: unheld; "
                              "unset: a hold is left as it is")
    needs: Needs | None = Field(default=None, description="A change of this package takes effect only after a "
                                "reboot or a driver reload (applied only with apply --allow)")

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"a version is a string like '2.10-3' or present/absent, got {value!r}")
        text = str(value)
        return text if text in KEYWORDS else versions.check_spec(text)

    @model_validator(mode="after")
    def _hold_needs_package(self) -> PackageSpec:
        if self.version == "absent" and self.hold:
            raise ValueError("a package that is absent cannot be held")
        return self

    @property
    def pinned(self) -> bool:
        """True when the spec names a version or a glob (not only present/absent)."""
        return self.version not in KEYWORDS


def _spec(value: Any) -> Any:
    """`name: present` / `name: "2.10-3"` are short for `name: {version: ...}`."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return {"version": value}
    return value


_SPEC_SCHEMA = {"anyOf": [
    {"type": "string", "description": "present, absent, an exact version or a version glob"},
    {"type": "object", "additionalProperties": False, "properties": {
        "version": {"type": "string", "default": "present"},
        "hold": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": None},
        "needs": {"anyOf": [{"enum": ["reboot", "driver-reload"]}, {"type": "null"}], "default": None}}}]}
PackageValue = Annotated[PackageSpec, BeforeValidator(_spec), WithJsonSchema(_SPEC_SCHEMA)]


def _name(name: str) -> str:
    if not PACKAGE_NAME.match(name):
        raise ValueError(f"not a package name: {name!r} (letters, digits, + . - _; not starting with -)")
    return name


PackageName = Annotated[str, AfterValidator(_name)]
# The `packages:` map of an entry (model.PackageSet): name -> spec; at least one.
PackageMap = Annotated[dict[PackageName, PackageValue], Field(min_length=1)]
PackageManager = Literal["apt", "dnf"]
