"""The meaning of gres.conf and cgroup.conf, for the round-trip oracle (tests/slurm_meaning.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tests.slurm_meaning_read import (
    BOOL_FALSE,
    BOOL_TRUE,
    ConfReader,
    SlurmConfError,
    Source,
    expand,
    line_pairs,
    sorted_list,
)

_CGROUP_BOOLEANS = {"cgroupautomount", "constraincores", "constraindevices", "constrainkmemspace",
                    "constrainramspace", "constrainswapspace", "taskaffinity", "signalchildrenprocesses",
                    "ignoresystemd", "ignoresystemdonfailure", "enablecontrollers"}
_GRES_CASING = {k.lower(): k for k in ("NodeName", "Name", "Type", "File", "Count", "Cores", "Links",
                                       "Flags", "AutoDetect", "MultipleFiles")}
_GRES_ALIASES = {"cpus": "cores", "files": "file"}


@dataclass
class GresMeaning:
    """The meaning of a gres.conf: global AutoDetect and one normalised line per node and device."""

    autodetect: str | None = None
    lines: frozenset[str] = frozenset()


def _cores(value: str) -> str:
    """Canonical core list: '0-2,5' and '5,0,1,2' both become '0,1,2,5'."""
    numbers = sorted({int(name[1:]) for name in expand(f"c[{value}]")})
    return ",".join(str(n) for n in numbers)


def _gres_entries(node: str | None, params: dict[str, str]) -> Iterator[str]:
    base = {_GRES_ALIASES.get(k, k): v for k, v in params.items()}
    if "cores" in base:
        base["cores"] = _cores(base["cores"])
    if "flags" in base:
        base["flags"] = sorted_list(base["flags"])
    if "autodetect" in base:
        base["autodetect"] = base["autodetect"].lower()
    files = expand(base.pop("file")) if "file" in base else []
    if files and "multiplefiles" not in base:
        if base.get("count") in (None, str(len(files))):
            base.pop("count", None)
        variants = [{**base, "file": f} for f in files]
    else:
        if files:
            base["multiplefiles"] = ",".join(files)
        variants = [base]
    for item in variants:
        fields = [f"NodeName={node or '*'}"]
        fields += [f"{_GRES_CASING.get(k, k)}={item[k]}" for k in sorted(item)]
        yield " ".join(fields)


def gres_conf_meaning(source: Source, main: str = "gres.conf") -> GresMeaning:
    """Parse gres.conf (from a directory, a path or a dict of texts); a missing file means nothing."""
    reader = ConfReader(source, main)
    if not reader.exists(reader.main):
        return GresMeaning()
    autodetect: str | None = None
    lines: set[str] = set()
    for line in reader.lines(reader.main, {}):
        pairs = line_pairs(line)
        if not pairs:
            continue
        params = dict(pairs)
        first = pairs[0][0]
        if first == "autodetect" and len(pairs) == 1:
            autodetect = pairs[0][1].lower()
        elif first == "nodename":
            nodes = params.pop("nodename")
            for node in expand(nodes):
                lines.update(_gres_entries(node, params))
        elif first == "name":
            lines.update(_gres_entries(None, params))
        else:
            raise SlurmConfError(f"{line.file}:{line.number}: a gres.conf line starts with NodeName=, Name= "
                                 f"or AutoDetect=, not {first}")
    return GresMeaning(autodetect, frozenset(lines))


def cgroup_conf_meaning(source: Source, main: str = "cgroup.conf") -> dict[str, str]:
    """Parse cgroup.conf into {lower-case key: value}, booleans as yes/no; a missing file is {}."""
    reader = ConfReader(source, main)
    if not reader.exists(reader.main):
        return {}
    out: dict[str, str] = {}
    for line in reader.lines(reader.main, {}):
        for key, value in line_pairs(line):
            low = value.lower()
            if low in {"yes", "true"} or (key in _CGROUP_BOOLEANS and low in BOOL_TRUE):
                value = "yes"
            elif low in {"no", "false"} or (key in _CGROUP_BOOLEANS and low in BOOL_FALSE):
                value = "no"
            out[key] = value
    return out
