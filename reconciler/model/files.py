"""Desired-state schema of what is kept on the nodes: `images:`, `patches:`, `files:` (with templates and
notify), `services:` and `packages:`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PlainValidator,
    PrivateAttr,
    StrictInt,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from reconciler.model import values
from reconciler.model.base import AbsPath, AllowLockout, Hostlist, NodeSelection, Strict, absolute, hostlist_expr
from reconciler.model.packages import PackageMap
from reconciler.model.secrets import AGE_SUFFIX
from reconciler.model.values import EnrootUri, MultilineText, NameToken, Text

_MODE = re.compile(r"^0?[0-7]{3,4}$")


class Image(Strict):
    """An enroot container image kept as a squashfs file on shared storage."""

    uri: EnrootUri | None = Field(default=None, description="e.g. docker://nvcr.io#nvidia/pytorch:24.04-py3; "
                                  "unset (an image adopted by `reconciler import`): kept as present, never "
                                  "imported (a missing file is an error to fix)")
    path: AbsPath = Field(description="Target .sqsh file")
    import_on: NameToken = Field(description="The node that runs `enroot import`")

    _abs = field_validator("path")(lambda cls, v: absolute(v))


class Patch(Strict):
    """A script patch: a match -> replace edit, or a whole managed file."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path: AbsPath
    nodes: Hostlist
    match: MultilineText | None = None
    replace: MultilineText | None = None
    content: MultilineText | None = Field(default=None, description="Whole file content (instead of match/replace)")
    mode: str | None = Field(default=None, description="Octal, e.g. '0755'")
    owner: NameToken | None = None
    group: NameToken | None = None
    validate_cmd: str | None = Field(
        default=None, alias="validate",
        description="Checks the new file before install; %s is its temp path, e.g. sh -n %s")

    _abs = field_validator("path")(lambda cls, v: absolute(v))
    _check_nodes = field_validator("nodes")(lambda cls, v: hostlist_expr(v))

    @field_validator("validate_cmd")
    @classmethod
    def _validate_has_placeholder(cls, value: str | None) -> str | None:
        if value is not None and "%s" not in value:
            raise ValueError("validate needs %s where the new file's path goes, e.g. 'sh -n %s'")
        return value

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> str | None:
        if value is None:
            return None
        text = str(value)  # `mode: 0755` reaches us as the int 755 under YAML 1.2: read its digits as octal
        if not _MODE.match(text):
            raise ValueError(f"mode must be octal like '0755', got {value!r}")
        return text.zfill(4)

    @model_validator(mode="after")
    def _one_kind(self) -> Patch:
        edit = self.match is not None or self.replace is not None
        if edit and self.content is not None:
            raise ValueError("a patch has either match/replace or content, not both")
        if edit and (self.match is None or self.replace is None):
            raise ValueError("a match/replace patch needs both match and replace")
        if not edit and self.content is None:
            raise ValueError("a patch needs match/replace or content")
        return self


# ---------------------------------------------------------------- managed files and services

# Names a templated file may use, as `{name}` (literal braces are written `{{` and `}}`); README documents them.
TEMPLATE_VARIABLES = {
    "node": "the node's name (gpu01)",
    "host": "the address or ssh_config alias the reconciler reaches the node by",
    "cluster": "cluster.name",
    "controller": "the primary Slurm controller's node name",
    "config_dir": "cluster.config_dir (/etc/slurm)",
    "roles": "the node's roles, comma-separated (compute,login)",
}
_SERVICE = r"[A-Za-z0-9_][A-Za-z0-9_.@:+-]*"
_NOTIFY = re.compile(rf"(?:(reload)|(restart)) ({_SERVICE})(?(2)( rolling)?)|scontrol reconfigure")


def template_fields(text: str) -> list[str]:
    """The `{name}` fields of a template, checked: only TEMPLATE_VARIABLES, no format spec, conversion,
    attribute or index; raises ValueError naming the first bad one (a lone `{` or `}` included)."""
    import string

    names = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"template: {exc} (write a literal brace as {{{{ or }}}})") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in TEMPLATE_VARIABLES or spec or conversion:
            known = ", ".join("{" + v + "}" for v in TEMPLATE_VARIABLES)
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"template: unknown variable {shown} (known: {known}; write a literal brace as "
                             "{{ or }})")
        names.append(name)
    return names


def _notify_text(text: str) -> str:
    values.no_control_chars(text)
    if not _NOTIFY.fullmatch(text):
        raise ValueError(f"not a notify entry: {text!r} (use 'reload SERVICE', 'restart SERVICE', "
                         "'restart SERVICE rolling', 'scontrol reconfigure' or {command: CMD})")
    return text


class NotifyCommand(Strict):
    """A shell command run once on each node where the file changed, e.g. `sysctl --system`."""

    command: Text = Field(min_length=1, description="Shell command, run as the SSH user (root)")


def _notify(value: Any) -> str | NotifyCommand:
    """One notify entry: a string form, or {command: CMD}; one error message either way."""
    if isinstance(value, NotifyCommand):
        return value
    if isinstance(value, str):
        return _notify_text(value)
    if isinstance(value, dict):
        command = value.get("command")
        if set(value) != {"command"} or not isinstance(command, str) or not command.strip():
            raise ValueError("a notify mapping is {command: CMD} with one non-empty command string")
        values.no_control_chars(command)
        return NotifyCommand(command=command)
    raise ValueError(f"not a notify entry: {value!r}")


_NOTIFY_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "string", "pattern": rf"^(reload {_SERVICE}|restart {_SERVICE}( rolling)?|scontrol reconfigure)$",
     "description": "'reload SERVICE', 'restart SERVICE', 'restart SERVICE rolling' (a node at a time, drained "
                    "first when jobs run on a Slurm node) or 'scontrol reconfigure' (once, on the controller)"},
    {"type": "object", "properties": {"command": {"type": "string", "description": "Shell command run once on "
                                                  "each node where the file changed, e.g. sysctl --system"}},
     "required": ["command"], "additionalProperties": False}]}
Notify = Annotated[str | NotifyCommand, PlainValidator(_notify), WithJsonSchema(_NOTIFY_SCHEMA)]


def _octal_mode(value: Any) -> str:
    text = str(value)  # `mode: 0644` reaches us as the int 644 under YAML 1.2: read its digits as octal
    if not _MODE.match(text):
        raise ValueError(f"mode must be octal like '0644', got {value!r}")
    return text.zfill(4)


def _validate_placeholder(value: str | None) -> str | None:
    if value is not None and "%s" not in value:
        raise ValueError("validate needs %s where the new file's path goes, e.g. 'sh -n %s'")
    return value


# What a file to remove cannot have (its `validate_cmd` is given as `validate`: the field's name is what is set).
ABSENT_REFUSED = ("content", "source", "template", "mode", "owner", "group", "validate_cmd")


class ManagedFile(NodeSelection):
    """A whole file kept on a set of nodes, with what must follow when it changes."""

    path: AbsPath
    state: Literal["present", "absent"] = Field(default="present", description="absent: the file is removed "
                                                "where it exists (kept as PATH.reconciler-bak unless secret); "
                                                "no content or source then")
    allow_lockout: AllowLockout = False
    content: MultilineText | None = Field(default=None, description="The file's text (instead of source)")
    source: Text | None = Field(default=None, description="A file of this repository, relative to the YAML "
                                "file's directory (instead of content)")
    template: bool = Field(default=False, description="Replace {node}, {host}, {cluster}, {controller}, "
                           "{config_dir}, {roles}; literal braces as {{ and }}")
    mode: str = Field(default="0644", description="Octal, e.g. '0644'")
    owner: NameToken = "root"
    group: NameToken = "root"
    validate_cmd: str | None = Field(
        default=None, alias="validate",
        description="Checks the new file before install; %s is its temp path, e.g. 'visudo -cf %s'")
    notify: list[Notify] = Field(default_factory=list, description="What must follow when the file changes")
    secret: bool = Field(default=False, description="Never show the content: plans show a sha256 fingerprint "
                         "(implied by an age-encrypted source, one ending in .age)")
    _source_text: str | None = PrivateAttr(default=None)  # set by the loader from `source` (.age: when decrypted)
    _age: Any = PrivateAttr(default=None)  # an .age source as read, never decrypted: agesecrets.Encrypted

    _abs = field_validator("path")(lambda cls, v: absolute(v))
    _mode = field_validator("mode", mode="before")(lambda cls, v: _octal_mode(v))
    _validate = field_validator("validate_cmd")(lambda cls, v: _validate_placeholder(v))

    @model_validator(mode="after")
    def _one_content(self) -> ManagedFile:
        if self.state == "absent":
            given = [k for k in ABSENT_REFUSED if k in self.model_fields_set]
            if given:
                names = ", ".join("validate" if k == "validate_cmd" else k for k in given)
                raise ValueError(f"a file with state: absent is removed: {names} would say nothing (remove them)")
            return self
        if (self.content is None) == (self.source is None):
            raise ValueError("a file needs exactly one of content and source")
        if self.template and self.content is not None:
            template_fields(self.content)
        return self

    @model_validator(mode="after")
    def _encrypted_is_secret(self) -> ManagedFile:
        if self.encrypted:
            if not self.secret and "secret" in self.model_fields_set:
                raise ValueError("an age-encrypted source (.age) is always secret: remove `secret: false`")
            self.secret = True
        return self

    @property
    def encrypted(self) -> bool:
        """True when the source is an age-encrypted file of the repository (its name ends in .age)."""
        return self.source is not None and self.source.endswith(AGE_SUFFIX)

    def text(self) -> str | None:
        """The file's text before templating: inline content, or the source file the loader read."""
        return self.content if self.content is not None else self._source_text

    def notifications(self) -> list[tuple[str, str, bool]]:
        """Each notify entry as (kind, target, rolling): kind reload/restart/command/reconfigure."""
        out = []
        for item in self.notify:
            if isinstance(item, NotifyCommand):
                out.append(("command", item.command, False))
                continue
            match = _NOTIFY.fullmatch(item)
            assert match is not None
            if match.group(3) is None:
                out.append(("reconfigure", "scontrol reconfigure", False))
            else:
                out.append((match.group(1) or match.group(2), match.group(3), match.group(4) is not None))
        return out


class ManagedService(NodeSelection):
    """A service's wanted state on a set of nodes (systemd or supervisord, as the node's service_manager)."""

    name: NameToken = Field(description="systemd unit or supervisord program name")
    state: Literal["running", "stopped"] = "running"
    enabled: bool | None = Field(default=None, description="Start at boot (systemd only); null: leave alone")
    allow_lockout: AllowLockout = False


class PackageSet(NodeSelection):
    """Packages kept on a set of nodes (reconciler/model/packages.py: the specs; drivers/packages.py)."""

    allow_downgrade: bool = Field(default=False, description="A change to a lower version than installed is an "
                                  "error unless true")
    packages: PackageMap = Field(description="name -> present, absent, a version, a glob (570.86.*), or "
                                 "{version, hold, needs}")
    update_cache: bool = Field(default=False, description="Refresh the package metadata (apt-get update, dnf "
                               "makecache) before this node's package transaction, when it has one")
    cache_valid_time: StrictInt | None = Field(default=None, ge=1, le=10 * 365 * 86400, description="Seconds: also "
                                         "refresh when the metadata is older than this, even with nothing to "
                                         "install (implies update_cache)")
    allow_lockout: AllowLockout = False

    @model_validator(mode="after")
    def _valid_time_updates(self) -> PackageSet:
        if self.cache_valid_time is not None:
            if "update_cache" in self.model_fields_set and not self.update_cache:
                raise ValueError("cache_valid_time asks for a refresh: it cannot go with update_cache: false")
            self.update_cache = True
        return self
