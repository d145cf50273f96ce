"""Property tests (Hypothesis, fixed-seed "ci" profile): rendered files read back to the desired values.

1. For generated valid desired states, slurm.conf, gres.conf, cgroup.conf, the exports block and the fstab
   block parse back (tests/desired/hostile/parsers.py, written from the formats' rules) to exactly the desired
   values, and no value adds a line or a key.
2. For generated hostile strings in every rendered string field: the loader refuses them with
   file:line:col, or the rendered file parses back to the same value.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from reconciler import params as slurm_params
from reconciler.desired.loader import DesiredStateError, LoadedState, load_dir
from reconciler.model import DesiredState
from reconciler.model import values as value_rules
from reconciler.render import render_file
from tests.desired.hostile.parsers import exports_entries, fstab_entries, slurm_lines

KNOWN = {"clustername", "slurmctldhost", "nodename", "partitionname", "prolog", "epilog", "authtype",
         "slurmuser", "slurmctldport", "slurmdport", "statesavelocation", "slurmdspooldir", "proctracktype",
         "selecttype", "returntoservice", "taskplugin", "selecttypeparameters", "schedulertype", "grestypes",
         "slurmctldlogfile", "slurmdlogfile", "cgroupplugin", "constraincores", "healthcheckprogram",
         "healthcheckinterval", "healthchecknodestate", "include", "state", "nodes", "default", "maxtime",
         "features", "gres", "cpus", "realmemory", "name", "type", "file", "autodetect", "count", "cores", "links"}

# Printable text Slurm can carry: ASCII without '"', plus some non-ASCII letters; spaces, '#', '\\' included.
SLURM_TEXT = st.text(st.sampled_from([chr(c) for c in range(32, 127) if chr(c) != '"'] + list("éüßλ中")),
                     min_size=1, max_size=20)
WORD = st.text(st.sampled_from(list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789_.-/#\\")), min_size=1, max_size=12)
def _undocumented(key: str) -> bool:
    """Not a key any Slurm release documents (those go directly under slurm_conf, not under extra)."""
    scopes = (("slurm.conf", "global"), ("slurm.conf", "node"), ("slurm.conf", "partition"), ("cgroup.conf", "global"))
    return key.lower() not in KNOWN and all(slurm_params.lookup(f, key, scope) is None for f, scope in scopes)


KEY = st.from_regex(r"[A-Z][a-z]{2,8}[A-Z0-9][a-z0-9]{0,4}", fullmatch=True).filter(_undocumented)
SCALAR = st.one_of(SLURM_TEXT, st.integers(-10**6, 10**9), st.booleans())
PATH_PART = st.text(st.sampled_from(list("abcxyz019 #\\_-é")), min_size=1, max_size=8).filter(
    lambda p: p not in (".", ".."))
PATH = st.lists(PATH_PART, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
CLIENT = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.tuples(st.ip_addresses(v=4), st.integers(8, 32)).map(lambda t: f"{t[0]}/{t[1]}"),
    st.from_regex(r"[a-z]([a-z0-9-]{0,7}[a-z0-9])?(\.[a-z]{2,5}){0,2}", fullmatch=True),  # no label ends in -
    st.from_regex(r"@[a-z][a-z0-9_]{0,8}", fullmatch=True),
    st.just("*.example.com"),
)
EXPORT_OPTIONS = st.lists(st.sampled_from(["rw", "ro", "sync", "async", "no_subtree_check", "root_squash",
                                           "all_squash", "anonuid=65534", "fsid=0", "sec=krb5:krb5p", "crossmnt"]),
                          min_size=1, max_size=4, unique=True)
MOUNT_OPTIONS = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}(=[a-z0-9.]{1,5})?", fullmatch=True), min_size=1,
                         max_size=4)


def _render(state: DesiredState, node: str, name: str) -> str:
    return render_file(state, node, name, "prop")


def _slurm(value: Any) -> str:
    """How a desired scalar reads back from a Slurm file."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    return str(value)


def _cgroup(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def base() -> dict[str, Any]:
    """A small valid desired state (as plain data) for the properties to fill in."""
    return {
        "cluster": {"name": "prop", "slurm_version": "23.11", "controllers": ["ctl"],
                    "slurm_conf": {"GresTypes": "gpu", "extra": {}},
                    "node_sets": [{"nodes": "gpu[01-02]", "CPUs": 8, "gpus": {"count": 2, "type": "h100"}}],
                    "partitions": [{"name": "gpu", "nodes": "gpu[01-02]", "default": True, "State": "UP"}],
                    "gres": {"lines": [{"nodes": "gpu[01-02]", "name": "gpu", "type": "h100",
                                        "file": "/dev/nvidia[0-1]"}]},
                    "cgroup": {"ConstrainCores": True, "extra": {}}},
        "nodes": [{"name": "ctl", "roles": ["controller", "nfs-server"]}, {"name": "gpu[01-02]", "roles": ["compute"]}],
        "storage": {"exports": [{"server": "ctl", "path": "/srv/shared", "clients": ["10.0.0.0/24"]}],
                    "mounts": [{"source": "ctl:/srv/shared", "mountpoint": "/shared", "nodes": "gpu[01-02]"}]},
    }


def _one(lines: list[list[tuple[str, str]]], first: str) -> list[list[tuple[str, str]]]:
    return [pairs for pairs in lines if pairs[0][0] == first]


@given(extra=st.dictionaries(KEY, SCALAR, max_size=5), features=st.lists(WORD, max_size=4),
       node_params=st.dictionaries(KEY, SCALAR, max_size=3), part_params=st.dictionaries(KEY, SCALAR, max_size=3),
       cgroup_extra=st.dictionaries(KEY, SCALAR, max_size=3), gres_type=WORD.filter(lambda w: ":" not in w),
       prolog=PATH, export_path=PATH, clients=st.lists(CLIENT, min_size=1, max_size=3),
       export_options=EXPORT_OPTIONS, source=st.tuples(st.just("ctl:"), PATH).map("".join), mountpoint=PATH,
       mount_options=MOUNT_OPTIONS)
def test_valid_states_read_back_exactly(extra: dict[str, Any], features: list[str], node_params: dict[str, Any],
                                        part_params: dict[str, Any], cgroup_extra: dict[str, Any], gres_type: str,
                                        prolog: str, export_path: str, clients: list[str],
                                        export_options: list[str], source: str, mountpoint: str,
                                        mount_options: list[str]) -> None:
    data = base()
    cluster = data["cluster"]
    cluster["slurm_conf"]["extra"] = extra
    cluster["node_sets"][0].update(Features=features, params=node_params)
    cluster["partitions"][0]["params"] = part_params
    cluster["cgroup"]["extra"] = cgroup_extra
    cluster["gres"]["lines"][0]["type"] = gres_type
    cluster["prolog"] = prolog
    data["storage"]["exports"][0].update(path=export_path, clients=clients, options=export_options)
    data["storage"]["mounts"][0].update(source=source, mountpoint=mountpoint, options=mount_options)
    state = DesiredState.model_validate(data)

    conf = _render(state, "ctl", "slurm.conf")
    lines = slurm_lines(conf)
    globals_ = dict(pairs[0] for pairs in lines if pairs[0][0] not in ("NodeName", "PartitionName"))
    assert all(len(p) == 1 for p in lines if p[0][0] not in ("NodeName", "PartitionName")), conf
    for key, value in extra.items():
        assert globals_[key] == _slurm(value)
    assert globals_["Prolog"] == prolog
    expected_keys = set(state.cluster.slurm_conf.written()) | set(extra) | {"ClusterName", "SlurmctldHost", "Prolog"}
    assert set(globals_) == expected_keys  # no value added a key
    [node_line] = _one(lines, "NodeName")
    node = dict(node_line)
    assert len(node) == len(node_line)
    assert node.get("Features", "") == ",".join(features)
    assert node["Gres"] == "gpu:h100:2"
    for key, value in node_params.items():
        assert node[key] == _slurm(value)
    [part_line] = _one(lines, "PartitionName")
    part = dict(part_line)
    assert len(part) == len(part_line) == 4 + len(part_params)  # name, nodes, default, state + params
    for key, value in part_params.items():
        assert part[key] == _slurm(value)

    gres = slurm_lines(_render(state, "gpu01", "gres.conf"))
    assert gres == [[("NodeName", "gpu[01-02]"), ("Name", "gpu"), ("Type", gres_type), ("File", "/dev/nvidia[0-1]")]]

    cgroup = slurm_lines(_render(state, "gpu01", "cgroup.conf"))
    assert all(len(p) == 1 for p in cgroup)
    assert dict(p[0] for p in cgroup) == {"ConstrainCores": "yes", **{k: _cgroup(v) for k, v in cgroup_extra.items()}}

    assert exports_entries(_render(state, "ctl", "exports")) == [
        (export_path, [(client, export_options) for client in clients])]
    assert fstab_entries(_render(state, "gpu01", "fstab")) == [(source, mountpoint, "nfs", mount_options, 0, 0)]


# ---------------------------------------------------------------- hostile strings in every rendered field

HOSTILE = st.text(st.one_of(st.sampled_from(list(' "#\\\n\r\t\0=,()[]:;$`\'|&*?/.@') + ["\u2028", "\u202e", "\xa0",
                                                                                        "\x85", "\x1b"]),
                            st.characters(codec="utf-8")), min_size=0, max_size=16)

Setter = Callable[[dict[str, Any], str], None]
Reader = Callable[[DesiredState], Any]


def _set(path: tuple[Any, ...]) -> Setter:
    def setter(data: dict[str, Any], value: str) -> None:
        node: Any = data
        for part in path[:-1]:
            node = node[part] if isinstance(part, int) else node.setdefault(part, {})
        node[path[-1]] = value
    return setter


def _global(key: str) -> Reader:
    return lambda state: dict(p[0] for p in slurm_lines(_render(state, "ctl", "slurm.conf")) if len(p) == 1).get(key)


def _node_value(key: str) -> Reader:
    return lambda state: dict(_one(slurm_lines(_render(state, "ctl", "slurm.conf")), "NodeName")[0]).get(key)


def _part_value(key: str) -> Reader:
    return lambda state: dict(_one(slurm_lines(_render(state, "ctl", "slurm.conf")), "PartitionName")[0]).get(key)


FIELDS: dict[str, tuple[Setter, Reader]] = {
    "slurm_conf.JobCompLoc": (_set(("cluster", "slurm_conf", "JobCompLoc")), _global("JobCompLoc")),
    "slurm_conf.extra value": (_set(("cluster", "slurm_conf", "extra", "SiteFooParam")), _global("SiteFooParam")),
    "slurm_conf.SlurmUser": (_set(("cluster", "slurm_conf", "SlurmUser")), _global("SlurmUser")),
    "prolog": (_set(("cluster", "prolog")), _global("Prolog")),
    "node_sets.params value": (_set(("cluster", "node_sets", 0, "params", "Arch")), _node_value("Arch")),
    "node_sets.Features[0]": (lambda d, v: d["cluster"]["node_sets"][0].update(Features=[v]), _node_value("Features")),
    "partitions.params value": (_set(("cluster", "partitions", 0, "params", "QOS")), _part_value("QOS")),
    "cgroup.CgroupMountpoint": (_set(("cluster", "cgroup", "CgroupMountpoint")),
                           lambda s: dict(p[0] for p in slurm_lines(_render(s, "gpu01", "cgroup.conf"))).get(
                               "CgroupMountpoint")),
    "gres.lines.type": (_set(("cluster", "gres", "lines", 0, "type")),
                        lambda s: dict(slurm_lines(_render(s, "gpu01", "gres.conf"))[0]).get("Type")),
    "exports.path": (_set(("storage", "exports", 0, "path")), lambda s: exports_entries(_render(s, "ctl", "exports"))[0][0]),
    "exports.clients[0]": (lambda d, v: d["storage"]["exports"][0].update(clients=[v]),
                           lambda s: exports_entries(_render(s, "ctl", "exports"))[0][1][0][0]),
    "exports.options[0]": (lambda d, v: d["storage"]["exports"][0].update(options=[v]),
                           lambda s: ",".join(exports_entries(_render(s, "ctl", "exports"))[0][1][0][1])),
    "mounts.source": (_set(("storage", "mounts", 0, "source")), lambda s: fstab_entries(_render(s, "gpu01", "fstab"))[0][0]),
    "mounts.mountpoint": (_set(("storage", "mounts", 0, "mountpoint")),
                          lambda s: fstab_entries(_render(s, "gpu01", "fstab"))[0][1]),
    "mounts.options[0]": (lambda d, v: d["storage"]["mounts"][0].update(options=[v]),
                          lambda s: ",".join(fstab_entries(_render(s, "gpu01", "fstab"))[0][3])),
}


def _write(data: dict[str, Any], directory: Path) -> None:
    yaml = YAML(typ="safe")
    for key, value in data.items():
        out = StringIO()
        yaml.dump({key: value}, out)
        (directory / f"{key}.yaml").write_text(out.getvalue(), encoding="utf-8")


def _load_or_located_errors(data: dict[str, Any]) -> LoadedState | None:
    """Write DATA as a desired state and load it; None when refused, every error then naming file:line."""
    with tempfile.TemporaryDirectory() as tmp:
        _write(data, Path(tmp))
        try:
            return load_dir(tmp)
        except DesiredStateError as exc:
            assert all(e.location is not None and e.location.line >= 1 for e in exc.errors), exc
            return None


@given(field=st.sampled_from(sorted(FIELDS)),
       value=st.tuples(st.sampled_from(["", "/", "/srv/", "ctl:/"]), HOSTILE).map("".join))
def test_hostile_strings_are_refused_or_read_back(field: str, value: str) -> None:
    setter, reader = FIELDS[field]
    data = base()
    setter(data, value)
    loaded = _load_or_located_errors(data)
    if loaded is not None:
        assert reader(loaded.state) == value, f"{field}: {value!r} read back differently"


# ---------------------------------------------------------------- Lustre mounts (issue 14)

NID = st.tuples(st.ip_addresses(v=4).map(str), st.sampled_from(["tcp", "tcp0", "tcp1", "o2ib", "o2ib0", "o2ib3"])).map(
    "@".join)
MGS = st.lists(st.lists(NID, min_size=1, max_size=2).map(",".join), min_size=1, max_size=3).map(":".join)
FSNAME = st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True)
SUBDIR = st.lists(st.from_regex(r"[a-z0-9_][a-z0-9_.-]{0,6}", fullmatch=True).filter(lambda p: p not in (".", "..")),
                  max_size=2).map(lambda parts: "".join(f"/{p}" for p in parts))
LUSTRE_SOURCE = st.tuples(MGS, st.just(":/"), FSNAME, SUBDIR).map("".join)
# Valid option lists: _netdev, at most one option of each exclusive group, any other known flags and values.
_GROUPS = [st.sampled_from([None, *group]) for group in value_rules.LUSTRE_EXCLUSIVE]
_FREE = sorted(value_rules.LUSTRE_FLAGS - {o for g in value_rules.LUSTRE_EXCLUSIVE for o in g} - {"_netdev"})
LUSTRE_OPTIONS = st.tuples(st.tuples(*_GROUPS), st.lists(st.sampled_from(_FREE + ["retry=3", "mgssec=krb5p",
                                                                                  "network=o2ib1"]), unique=True,
                                                         max_size=4), st.randoms(use_true_random=False)).map(
    lambda t: t[2].sample(o := ["_netdev", *[x for x in t[0] if x], *t[1]], len(o)))


def _lustre_base(source: str, options: list[str]) -> dict[str, Any]:
    data = base()
    data["storage"]["mounts"].append({"source": source, "mountpoint": "/lustre", "type": "lustre",
                                      "options": options, "nodes": "gpu[01-02]"})
    return data


@given(source=LUSTRE_SOURCE, options=LUSTRE_OPTIONS)
def test_valid_lustre_mounts_read_back_exactly(source: str, options: list[str]) -> None:
    state = DesiredState.model_validate(_lustre_base(source, options))
    entries = fstab_entries(_render(state, "gpu02", "fstab"))
    assert entries[1] == (source, "/lustre", "lustre", options, 0, 0)


@given(field=st.sampled_from(["source", "option"]),
       value=st.tuples(st.sampled_from(["", "10.0.0.5@tcp:/", "10.0.0.5@tcp", "fl"]), HOSTILE).map("".join))
def test_hostile_lustre_values_are_refused_or_read_back(field: str, value: str) -> None:
    data = _lustre_base(value, ["_netdev"]) if field == "source" else _lustre_base("10.0.0.5@tcp:/lfs",
                                                                                   ["_netdev", value])
    loaded = _load_or_located_errors(data)
    if loaded is None:
        return
    _, _, kind, options = fstab_entries(_render(loaded.state, "gpu01", "fstab"))[1][:4]
    assert kind == "lustre"
    if field == "source":
        assert fstab_entries(_render(loaded.state, "gpu01", "fstab"))[1][0] == value
        assert value_rules.lustre_source(value) == value
    else:
        assert options == ["_netdev", value]
        assert value_rules.lustre_options(options) == options
