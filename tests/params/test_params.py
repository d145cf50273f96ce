"""The Slurm parameter tables: lookup, did-you-mean, version checks, change kinds, value types."""

from __future__ import annotations

import pytest

from reconciler import params
from reconciler.model import SLURM_VERSION_FAMILIES
from reconciler.params import ParameterNotInVersion, UnknownParameter, change_kind, coerce, lookup, resolve

ALL = params.families("slurm.conf")

# The decisions drivers/slurm_consequences.py hard-coded before it read these tables (main at f16b265), kept here
# verbatim so the comparison outlives the lists there.
ALWAYS_RESTART = frozenset({
    "SlurmctldHost", "ControlMachine", "SlurmctldPort", "SlurmdPort", "AuthType", "AuthAltTypes", "CredType",
    "SlurmUser", "SlurmdUser", "StateSaveLocation", "SlurmdSpoolDir", "PluginDir", "ClusterName",
    "SlurmctldParameters", "CommunicationParameters",
})
RESTART_BEFORE_23_11 = frozenset({
    "SelectType", "SelectTypeParameters", "SwitchType", "ProctrackType", "TaskPlugin", "GresTypes",
    "JobAcctGatherType", "JobAcctGatherParams", "AccountingStorageType", "AccountingStorageHost",
    "JobCompType", "MpiDefault", "PrologFlags", "LaunchParameters", "SlurmdParameters", "TopologyPlugin",
    "PriorityType", "SchedulerType", "PreemptType", "SlurmctldPidFile", "SlurmdPidFile", "TreeWidth",
    "KeepAliveTime", "MessageTimeout",
})
NODE_RESTART_KEYS = frozenset({"CPUs", "Boards", "Sockets", "SocketsPerBoard", "CoresPerSocket",
                               "ThreadsPerCore", "RealMemory", "Gres", "CpuSpecList", "MemSpecLimit"})
# What the daemons showed those decisions wrong about (tests/params/test_observed_consequences_testbed.py):
# SlurmdPort needs no slurmctld restart; TopologyPlugin before 23.11 needs only slurmctld restarted.
CORRECTED_GLOBAL = frozenset({"SlurmdPort", "TopologyPlugin"})


def test_the_tables_cover_the_models_families() -> None:
    for file in params.FILES:
        assert params.families(file) == SLURM_VERSION_FAMILIES
        assert all(tag.startswith("slurm-" + f.replace(".", "-") + "-") for f, tag in params.source_tags(file).items())


@pytest.mark.parametrize("spelling", ["MessageTimeout", "messagetimeout", "MESSAGETIMEOUT", "mEsSaGeTiMeOuT"])
def test_lookup_ignores_case_and_returns_the_canonical_name(spelling: str) -> None:
    param = lookup("slurm.conf", spelling)
    assert param is not None and param.name == "MessageTimeout"
    assert param.type == "int" and param.families == ALL and not param.deprecated


@pytest.mark.parametrize(("file", "scope", "key", "name"), [
    ("slurm.conf", "node", "realmemory", "RealMemory"),
    ("slurm.conf", "partition", "maxtime", "MaxTime"),
    ("slurm.conf", "nodeset", "feature", "Feature"),
    ("gres.conf", "line", "FILE", "File"),
    ("gres.conf", "global", "autodetect", "AutoDetect"),
    ("cgroup.conf", "global", "constrainramspace", "ConstrainRAMSpace"),
])
def test_lookup_per_file_and_scope(file: str, scope: str, key: str, name: str) -> None:
    param = lookup(file, key, scope)
    assert param is not None and (param.name, param.file, param.scope) == (name, file, scope)


def test_scopes_are_separate() -> None:
    assert lookup("slurm.conf", "RealMemory") is None  # a node key, not a global one
    assert lookup("slurm.conf", "MaxTime", "node") is None
    assert lookup("slurm.conf", "Nodes", "partition") is not None


def test_unknown_key_gets_did_you_mean() -> None:
    with pytest.raises(UnknownParameter, match=r"unknown slurm.conf parameter 'MesageTimeout' \(did you mean MessageTimeout\?\)"):
        resolve("slurm.conf", "MesageTimeout", "22.05")
    assert params.suggestions("slurm.conf", "MesageTimeout")[0] == "MessageTimeout"
    with pytest.raises(UnknownParameter, match=r"unknown slurm.conf node parameter 'RealMemroy' \(did you mean RealMemory\?\)"):
        resolve("slurm.conf", "RealMemroy", "22.05", scope="node")
    with pytest.raises(UnknownParameter) as info:
        resolve("slurm.conf", "Xyzzy", None)
    assert "did you mean" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_key_added_after_22_05_is_refused_for_22_05_naming_its_first_release() -> None:
    param = lookup("slurm.conf", "MaxBatchRequeue")
    assert param is not None and param.families[0] == "23.02"
    with pytest.raises(ParameterNotInVersion, match=r"MaxBatchRequeue is not a slurm.conf parameter in Slurm 22.05 \(first in 23.02\)"):
        resolve("slurm.conf", "maxbatchrequeue", "22.05")
    assert resolve("slurm.conf", "maxbatchrequeue", "23.02").name == "MaxBatchRequeue"


def test_26_05_is_a_family_of_its_own() -> None:
    """26.05 (Debian forky's Slurm, a testbed release) is read from its own tag: a key new in 26.05 is refused for
    25.11 naming 26.05, and a cluster may say slurm_version 26.05."""
    assert params.source_tags()["26.05"].startswith("slurm-26-05-") and "26.05" in SLURM_VERSION_FAMILIES
    with pytest.raises(ParameterNotInVersion, match=r"HealthCheckTimeout is not .* in Slurm 25.11 \(first in 26.05\)"):
        resolve("slurm.conf", "HealthCheckTimeout", "25.11")
    assert resolve("slurm.conf", "healthchecktimeout", "26.05").name == "HealthCheckTimeout"


def test_a_removed_key_is_refused_naming_the_release_that_dropped_it() -> None:
    assert lookup("slurm.conf", "SlurmctldPlugstack").families[-1] == "22.05"  # type: ignore[union-attr]
    with pytest.raises(ParameterNotInVersion, match=r"SlurmctldPlugstack is not a slurm.conf parameter in Slurm 24.05 \(removed in 23.02\)"):
        resolve("slurm.conf", "SlurmctldPlugstack", "24.05")
    resolve("slurm.conf", "SlurmctldPlugstack", "22.05")


def test_defunct_keys_are_deprecated_and_not_in_the_families_that_ignore_them() -> None:
    param = lookup("slurm.conf", "ExtSensorsType")  # 23.11+ parse it only to log "defunct"
    assert param is not None and param.deprecated and param.families[-1] == "23.02"
    with pytest.raises(ParameterNotInVersion, match="removed in 23.11"):
        resolve("slurm.conf", "ExtSensorsType", "25.05")
    sdc = lookup("slurm.conf", "SallocDefaultCommand")  # every release's parser stops with fatal()
    assert sdc is not None and sdc.families == () and sdc.deprecated
    with pytest.raises(ParameterNotInVersion):
        resolve("slurm.conf", "SallocDefaultCommand", "22.05")


def test_undocumented_aliases_are_known_and_flagged_deprecated() -> None:
    for key in ("ControlMachine", "FastSchedule"):
        param = lookup("slurm.conf", key)
        assert param is not None and param.deprecated
    control = lookup("slurm.conf", "ControlMachine")
    assert control is not None and control.families == ALL and "22.05" in control.documented
    assert "25.05" not in control.documented


def test_no_version_check_without_a_family_or_outside_the_tables() -> None:
    assert resolve("slurm.conf", "MaxBatchRequeue", None).name == "MaxBatchRequeue"
    assert resolve("slurm.conf", "MaxBatchRequeue", "19.05").name == "MaxBatchRequeue"


# ---------------------------------------------------------------- change kinds

def test_curated_decisions_reproduce_the_consequence_lists() -> None:
    """ALWAYS_RESTART, RESTART_BEFORE_23_11 and NODE_RESTART_KEYS of drivers/slurm_consequences.py, less what
    the observed table corrected (test_kinds_corrected_by_the_observed_table)."""
    for key in ALWAYS_RESTART - CORRECTED_GLOBAL:
        for family in lookup("slurm.conf", key).families:  # type: ignore[union-attr]
            assert change_kind("slurm.conf", key, family) == "restart_all", (key, family)
    for key in RESTART_BEFORE_23_11 - CORRECTED_GLOBAL:
        for family in lookup("slurm.conf", key).families:  # type: ignore[union-attr]
            before = tuple(map(int, family.split("."))) < (23, 11)
            assert change_kind("slurm.conf", key, family) == ("restart_all" if before else "reconfigure"), (key, family)
    for key in NODE_RESTART_KEYS:  # restart slurmd, every family (and slurmctld before 23.11; Gres: see below)
        for family in lookup("slurm.conf", key, "node").families:  # type: ignore[union-attr]
            assert change_kind("slurm.conf", key, family, "node") in {"restart_slurmd", "restart_all"} or (
                key == "Gres" and not _before_23_11(family)), (key, family)


def _before_23_11(family: str) -> bool:
    return tuple(map(int, family.split("."))) < (23, 11)


# Corrections from the table measured on real 22.05, 24.11 and 26.05 daemons (docs/slurm-parameters.md): families
# before 23.11 follow 22.05, later ones 24.11 (26.05 needed the same); the note names the test and says observed on
# the family itself, or inferred (25.x from 24.11 and 26.05 both).
@pytest.mark.parametrize(("file", "key", "family", "scope", "kind"), [
    ("slurm.conf", "SlurmdPort", "22.05", "global", "restart_slurmd"),  # was restart_all (man: restart slurmctld)
    ("slurm.conf", "SlurmdPort", "24.11", "global", "restart_slurmd"),  # was restart_all
    ("slurm.conf", "SlurmdPort", "20.11", "global", "restart_slurmd"),
    ("slurm.conf", "TopologyPlugin", "22.05", "global", "restart_slurmctld"),  # was restart_all
    ("slurm.conf", "TopologyPlugin", "23.02", "global", "restart_slurmctld"),
    ("slurm.conf", "TopologyPlugin", "24.11", "global", "reconfigure"),
    ("slurm.conf", "NodeName", "24.11", "node", "reconfigure"),
    ("slurm.conf", "CPUs", "22.05", "node", "restart_all"),  # was restart_slurmd
    ("slurm.conf", "CPUs", "24.11", "node", "restart_slurmd"),  # kept: the job dies however it is applied
    ("slurm.conf", "Gres", "22.05", "node", "restart_all"),  # was restart_slurmd
    ("slurm.conf", "Gres", "24.11", "node", "reconfigure"),  # was restart_slurmd
    ("slurm.conf", "Gres", "25.11", "node", "reconfigure"),
    ("gres.conf", "File", "22.05", "line", "restart_slurmd"),
    ("gres.conf", "File", "24.11", "line", "reconfigure"),  # was restart_slurmd
    ("gres.conf", "Count", "24.05", "line", "reconfigure"),  # was restart_slurmd
    ("slurm.conf", "SlurmdPort", "26.05", "global", "restart_slurmd"),
    ("slurm.conf", "TopologyPlugin", "26.05", "global", "reconfigure"),
    ("slurm.conf", "NodeName", "26.05", "node", "reconfigure"),
    ("slurm.conf", "CPUs", "26.05", "node", "restart_slurmd"),
    ("slurm.conf", "Gres", "26.05", "node", "reconfigure"),
    ("gres.conf", "File", "26.05", "line", "reconfigure"),
])
def test_kinds_corrected_by_the_observed_table(file: str, key: str, family: str, scope: str, kind: str) -> None:
    assert change_kind(file, key, family, scope) == kind
    source, note = params.change_source(file, key, family, scope)
    assert source == "curated" and "tests/params/test_observed_consequences_testbed.py" in note
    if family in ("22.05", "24.11", "26.05"):
        assert f"observed on {family} by" in note
    elif family in ("25.05", "25.11"):
        assert "inferred from the 24.11 and 26.05 observations" in note
    else:
        assert f"inferred from the {'22.05' if _before_23_11(family) else '24.11'} observation in" in note


# Node changes before 24.11 follow the documents (slurm.conf.5 22.05-24.05, NODE CONFIGURATION; scontrol.1 22.05;
# SchedMD's FAQ: reconfigure from 24.11), not 24.11's observation nor a 2-node testbed that never forwards.
@pytest.mark.parametrize(("key", "family", "kind"), [
    ("NodeName", "22.05", "restart_all"),  # was restart_slurmctld
    ("NodeName", "23.02", "restart_all"),
    ("NodeName", "23.11", "restart_all"),  # was reconfigure (inferred from 24.11)
    ("NodeName", "24.05", "restart_all"),  # was reconfigure (inferred from 24.11)
    ("CPUs", "23.11", "restart_all"),  # was restart_slurmd (inferred from 24.11)
    ("Gres", "24.05", "restart_all"),  # was reconfigure (inferred from 24.11)
])
def test_node_changes_before_24_11_follow_the_documents(key: str, family: str, kind: str) -> None:
    assert change_kind("slurm.conf", key, family, "node") == kind
    source, note = params.change_source("slurm.conf", key, family, "node")
    assert source == "curated" and f"slurm.conf.5 {family} (NODE CONFIGURATION)" in note
    assert "inferred from" not in note
    if key == "NodeName":
        assert "tests/params/test_forwarding_testbed.py" in note and "from 24.11" in note


def test_observed_kinds_keep_what_the_man_pages_add() -> None:
    """gres.conf Type: the man page's slurmctld and slurmd restart still counts where reconfigure was observed."""
    assert change_kind("gres.conf", "Type", "24.11", "line") == "restart_all"
    assert params.change_source("gres.conf", "Type", "24.11", "line")[0] == "man+curated"
    assert "overrides the man page" in params.change_source("slurm.conf", "SlurmdPort", "22.05")[1]


def test_every_curated_key_is_a_real_parameter() -> None:
    for key in ALWAYS_RESTART | RESTART_BEFORE_23_11:
        assert lookup("slurm.conf", key) is not None, key
    for key in NODE_RESTART_KEYS:
        assert lookup("slurm.conf", key, "node") is not None, key


@pytest.mark.parametrize(("file", "key", "family", "scope", "kind", "source"), [
    # the man pages of 21.08 to 23.02 say "A restart of slurmctld is required"; 23.11 dropped the note
    ("slurm.conf", "MaxJobCount", "22.05", "global", "restart_slurmctld", "man"),
    ("slurm.conf", "MaxJobCount", "23.11", "global", "reconfigure", "default"),
    ("slurm.conf", "CoreSpecPlugin", "22.05", "global", "restart_slurmd", "man"),
    ("slurm.conf", "SchedulerParameters", "22.05", "global", "reconfigure", "default"),  # note is on one sub-option
    ("slurm.conf", "GresTypes", "22.05", "global", "restart_all", "man+curated"),
    ("gres.conf", "Cores", "22.05", "line", "restart_all", "man+curated"),  # slurmctld (man) + slurmd (curated)
    ("gres.conf", "Count", "22.05", "line", "restart_slurmd", "curated"),
    ("cgroup.conf", "ConstrainCores", "23.11", "global", "reconfigure", "default"),  # cgroup.conf.5: reconfigure
    ("cgroup.conf", "CgroupPlugin", "22.05", "global", "reconfigure", "default"),
    ("slurm.conf", "NodeName", "22.05", "node", "restart_all", "curated"),
    ("slurm.conf", "NodeName", "24.11", "node", "reconfigure", "curated"),
])
def test_change_kinds_and_their_provenance(file: str, key: str, family: str, scope: str, kind: str, source: str) -> None:
    assert change_kind(file, key, family, scope) == kind
    assert params.change_source(file, key, family, scope)[0] == source


def test_every_parameter_has_one_valid_change_kind_per_family() -> None:
    for file in params.FILES:
        for scope in params.scopes(file):
            for param in params.parameters(file, scope):
                for family in param.families:
                    assert change_kind(file, param.name, family, scope) in params.KINDS


def test_change_kind_refuses_a_key_the_family_lacks() -> None:
    with pytest.raises(ParameterNotInVersion):
        change_kind("slurm.conf", "MaxBatchRequeue", "22.05")


# ---------------------------------------------------------------- value types

@pytest.mark.parametrize(("key", "scope", "value"), [
    ("MessageTimeout", "global", 10), ("MessageTimeout", "global", "10"), ("MessageTimeout", "global", "UNLIMITED"),
    ("MaxJobCount", "global", "10k"), ("RealMemory", "node", 2000000), ("Default", "partition", "YES"),
    ("Default", "partition", True), ("Hidden", "partition", "no"), ("ReturnToService", "global", "0x2"),
    ("SelectType", "global", "select/cons_tres"), ("MaxTime", "partition", "2-00:00:00"),
])
def test_coerce_accepts_what_slurm_parses(key: str, scope: str, value: object) -> None:
    param = lookup("slurm.conf", key, scope)
    assert param is not None
    assert coerce(param, value) == value


@pytest.mark.parametrize(("key", "scope", "value", "message"), [
    ("MessageTimeout", "global", "abc", "MessageTimeout is an integer"),
    ("MessageTimeout", "global", 70000, "between 0 and 65535"),
    ("MessageTimeout", "global", "10k", "MessageTimeout is an integer"),  # K suffix: 32/64-bit keys only
    ("MessageTimeout", "global", -1, "between 0 and 65535"),
    ("MessageTimeout", "global", True, "is an integer"),
    ("Default", "partition", "maybe", "Default is yes/no"),
    ("RealMemory", "node", [1, 2], "single int value"),
])
def test_coerce_refuses_what_slurm_would_not_parse(key: str, scope: str, value: object, message: str) -> None:
    param = lookup("slurm.conf", key, scope)
    assert param is not None
    with pytest.raises(ValueError, match=message):
        coerce(param, value)


def test_float_keys_of_cgroup_conf() -> None:
    param = lookup("cgroup.conf", "AllowedRAMSpace")
    assert param is not None and param.type == "float"
    assert coerce(param, "101.5") == "101.5"
    with pytest.raises(ValueError, match="AllowedRAMSpace is a number"):
        coerce(param, "lots")


def test_type_of_a_family_where_it_differs() -> None:
    """SuspendTime was an integer on partition lines in 21.08 and a string (NONE/INFINITE/...) since 22.05."""
    assert resolve("slurm.conf", "SuspendTime", "21.08", "partition").type == "int"
    assert resolve("slurm.conf", "SuspendTime", "22.05", "partition").type == "string"
