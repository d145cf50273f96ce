"""Desired-state schema of `kernel:`: kernel modules (loaded or blacklisted, with options) and sysctls.

Imported by reconciler/model/state.py for DesiredState.kernel; the models here build on base.py's Strict and
NodeSelection. Names, keys and values are checked here, at load, so nothing the YAML says can end a line of a
modprobe.d or sysctl.d file, start a comment there, or reach a path outside /sys/module and /proc/sys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from reconciler.common import hostlist
from reconciler.model import values
from reconciler.model.base import AllowLockout, NodeSelection, Strict

MODULES_DIR = "/etc/modprobe.d"
SYSCTL_FILE = "/etc/sysctl.d/90-reconciler.conf"
MODULE_NAME_MAX = 55  # the kernel's MODULE_NAME_LEN is 56 with its NUL
SYSCTL_VALUE_MAX = 1024

_MODULE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAM_VALUE = re.compile(r"[A-Za-z0-9_.,:/+@%-]+")
_SYSCTL_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_:@+-]*")
_SYSCTL_VALUE = re.compile(r"[A-Za-z0-9_.,:/+@%*~| -]+")


def module_file(name: str) -> str:
    """The modprobe.d file the reconciler writes for module NAME."""
    return f"{MODULES_DIR}/reconciler-{name}.conf"


def sysfs_name(name: str) -> str:
    """The module's directory name under /sys/module (the kernel spells `-` as `_`)."""
    return name.replace("-", "_")


def sysctl_path(key: str) -> str:
    """The /proc/sys file of a dotted sysctl key."""
    return "/proc/sys/" + key.replace(".", "/")


def _scalar(value: Any) -> Any:
    """YAML scalars as the text written to the file: 600 and "600" mean the same; a boolean is ambiguous."""
    if isinstance(value, bool):
        raise ValueError("a boolean is ambiguous here: write the value the kernel takes, quoted (\"1\", \"Y\")")
    if isinstance(value, int):
        return str(value)
    return value


def module_name(value: str) -> str:
    """A kernel module name: letters, digits, _ and - (not first), at most 55 characters."""
    if not _MODULE.fullmatch(value) or len(value) > MODULE_NAME_MAX:
        raise ValueError(f"not a kernel module name: {value!r} (letters, digits, _ and -, at most "
                         f"{MODULE_NAME_MAX} characters, not starting with -)")
    return value


def param_name(value: str) -> str:
    """A module parameter name, as /sys/module/NAME/parameters/ lists them."""
    if not _PARAM.fullmatch(value) or len(value) > 64:
        raise ValueError(f"not a module parameter name: {value!r} (letters, digits and _, not starting with a "
                         "digit)")
    return value


def param_value(value: str) -> str:
    """A module parameter value: one word (no spaces, quotes, = or #: modprobe.d splits on them)."""
    if not _PARAM_VALUE.fullmatch(value) or len(value) > 1024:
        raise ValueError(f"not a module parameter value modprobe.d can hold: {value!r} (letters, digits and "
                         "_.,:/+@%- only, no spaces)")
    return value


def sysctl_key(value: str) -> str:
    """A dotted sysctl key (net.ipv4.tcp_keepalive_time): segments of letters, digits and _:@+-, no `/`."""
    segments = value.split(".")
    if len(value) > 256 or len(segments) < 2 or not all(_SYSCTL_SEGMENT.fullmatch(s) for s in segments):
        raise ValueError(f"not a sysctl key: {value!r} (dotted, e.g. net.ipv4.tcp_keepalive_time; segments of "
                         "letters, digits and _:@+-)")
    return value


def sysctl_value(value: str) -> str:
    """A sysctl value, whitespace-separated fields joined by one space (as sysctl.d and /proc/sys compare)."""
    values.no_control_chars(value, allow="\t")  # a tab separates fields as a space does; a newline ends a line
    fields = value.split()
    if not fields:
        raise ValueError("empty sysctl value")
    text = " ".join(fields)
    if len(text) > SYSCTL_VALUE_MAX or not _SYSCTL_VALUE.fullmatch(text):
        raise ValueError(f"not a sysctl value: {value!r} (letters, digits, spaces and _.,:/+@%*~|- only; no = "
                         "or #)")
    return text


def _checked(check: Any) -> Any:
    def validate(value: Any) -> Any:
        value = _scalar(value)
        return check(value) if isinstance(value, str) else value  # not a string: pydantic's str says so
    return BeforeValidator(validate)


ModuleName = Annotated[str, _checked(module_name), Field(description="Kernel module name, e.g. nvidia")]
ParamName = Annotated[str, _checked(param_name)]
ParamValue = Annotated[str, _checked(param_value)]
SysctlKey = Annotated[str, _checked(sysctl_key)]
SysctlValue = Annotated[str, _checked(sysctl_value)]


class KernelModule(NodeSelection):
    """A kernel module on a set of nodes: loaded, blacklisted or left as it is, and its options."""

    name: ModuleName
    state: Literal["loaded", "blacklisted"] | None = Field(
        default=None, description="loaded: `modprobe NAME` when not loaded; blacklisted: `blacklist` and "
        "`install NAME /bin/false` in modprobe.d, and unloaded (needs a driver reload) when loaded; null: leave "
        "loading alone")
    options: dict[ParamName, ParamValue] = Field(
        default_factory=dict, description="Module parameters, written as `options NAME k=v` to "
        "/etc/modprobe.d/reconciler-NAME.conf; a loaded module whose live value differs is reloaded (needs a "
        "driver reload)")
    allow_lockout: AllowLockout = False


class SysctlSet(NodeSelection):
    """Sysctl values on a set of nodes: in /etc/sysctl.d/90-reconciler.conf and set live."""

    values: dict[SysctlKey, SysctlValue] = Field(
        min_length=1, description="key -> value, e.g. net.ipv4.tcp_keepalive_time: 600")
    needs: Literal["reboot"] | None = Field(
        default=None, description="reboot: these values take effect at boot only (the file is written, the live "
        "value is not set; the change says it needs a reboot)")
    allow_lockout: AllowLockout = False


class Kernel(Strict):
    """Kernel modules and sysctls as desired state."""

    modules: list[KernelModule] = Field(default_factory=list)
    sysctls: list[SysctlSet] = Field(default_factory=list)


Problem = tuple[tuple[str | int, ...], str]


def kernel_problems(kernel: Kernel, roles: dict[str, set[str]], files: list[str]) -> Iterator[Problem]:
    """Across entries (ROLES: inventory node -> roles; FILES: the paths `files:` writes): unknown nodes, a module
    managed twice on one node, a sysctl given two values on one node, a `files:` entry writing our files."""
    def selected(item: NodeSelection) -> list[str]:
        named = set(hostlist.expand(item.nodes)) if item.nodes else set()
        return [n for n in roles if n in named or roles[n] & set(item.roles)]

    for kind, entries in (("modules", kernel.modules), ("sysctls", kernel.sysctls)):
        for index, item in enumerate(entries):
            if item.nodes and (missing := [n for n in hostlist.expand(item.nodes) if n not in roles]):
                yield ("kernel", kind, index, "nodes"), f"unknown nodes: {hostlist.compress(missing[:64])}"
    owner: dict[tuple[str, str], int] = {}
    for index, module in enumerate(kernel.modules):
        for node in selected(module):
            other = owner.setdefault((node, sysfs_name(module.name)), index)
            if other != index:
                yield (("kernel", "modules", index, "name"),
                       f"module {module.name} on node {node} is also in kernel.modules[{other}]")
                break
    value_of: dict[tuple[str, str], tuple[int, str]] = {}
    for index, entry in enumerate(kernel.sysctls):
        for key, value in entry.values.items():
            for node in selected(entry):
                other, was = value_of.setdefault((node, key), (index, value))
                if was != value:
                    yield (("kernel", "sysctls", index, "values", key),
                           f"{key} on node {node} is {was!r} in kernel.sysctls[{other}] and {value!r} here")
                    break
    ours = {SYSCTL_FILE: "kernel.sysctls", **{module_file(m.name): "kernel.modules" for m in kernel.modules}}
    for index, path in enumerate(files):
        if path in ours:
            yield ("files", index, "path"), f"{path} is managed by {ours[path]}: not a place for files:"

