"""The generator: its readers on small inputs, and a full run on SchedMD's repository reproducing the data."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.params import generate
from reconciler.params.sources import parse_c_tables, parse_man, restart_note

MIRROR = Path("/work/.mirror/SchedMD+slurm/repo")

MAN = r""".SH "PARAMETERS"
.TP
\fBAlpha\fR
First parameter.
A restart of slurmctld is required for changes to this parameter to take effect.
.IP
.RS
.TP
\fBnone\fR
A value, not a parameter.
.RE
.TP
\fBBeta\fR=\fI<n>\fR
Second. See \fBAlpha\fR.
.RS
.TP
\fBsub_option\fR
The slurmd daemon must be restarted for a change in this option to take effect.
.RE
.SH "NODE CONFIGURATION"
.TP
\fBNodeName\fR
Names.
"""


def test_man_parameters_values_and_sections() -> None:
    entries = parse_man(MAN)
    assert [(e.name, e.section) for e in entries] == [
        ("Alpha", "PARAMETERS"), ("Beta", "PARAMETERS"), ("NodeName", "NODE CONFIGURATION")]
    alpha, beta, _ = entries
    assert "none" in alpha.values and "A value" not in alpha.text
    assert restart_note(alpha.text) == (
        "restart_slurmctld", "A restart of slurmctld is required for changes to this parameter to take effect.")
    assert restart_note(beta.text) is None  # the note belongs to one sub-option
    assert restart_note(beta.values["sub_option"])[0] == "restart_slurmd"  # type: ignore[index]


@pytest.mark.parametrize(("sentence", "kind"), [
    ("A restart of slurmctld and the slurmd daemons is required for this to take effect.", "restart_all"),
    ("A restart of the slurmctld and slurmd daemons is required for changes to the Type option.", "restart_all"),
    ("A restart of the slurmd daemons is required for changes to this parameter", "restart_slurmd"),
    ("The slurmctld daemon must be restarted for changes to this parameter to take effect.", "restart_slurmctld"),
    ("It only takes effect upon restart of the slurmctld daemon.", "restart_slurmctld"),
    ("All Slurm daemons, commands and running jobs must be restarted for a change in SwitchType", "restart_all"),
    ("All Slurm daemons, commands and running jobs must be restarted or reconfigured for a change", None),
    ("Changes to this value take effect when the Slurm daemons are reconfigured.", None),
    ("Restarted jobs will have the environment variable SLURM_RESTART_COUNT set.", None),
])
def test_restart_sentences(sentence: str, kind: str | None) -> None:
    note = restart_note(sentence)
    assert (note[0] if note else None) == kind


def test_c_tables_both_initializer_styles_and_handlers() -> None:
    source = """
    static s_p_options_t stepd[] = {
        {.key = "NodeName", .type = S_P_ARRAY, .handler = _parse_nodename, .destroy = _d},
        {NULL}
    };
    s_p_options_t slurm_conf_options[] = {
        {"AccountingStoragePort", S_P_UINT16},
        {"DefCPUPerGPU" , S_P_UINT64}, /* comment {"Fake", S_P_STRING}, */
        {"ExtSensorsType", S_P_STRING, _defunct_option},
        {"PartitionName", S_P_ARRAY, _parse_partitionname,
         _destroy_partitionname},
        {NULL}
    };"""
    tables = dict(parse_c_tables(source))
    assert [(o.name, o.c_type, o.handler) for o in tables["stepd"]] == [("NodeName", "S_P_ARRAY", "_parse_nodename")]
    assert [(o.name, o.c_type, o.handler) for o in tables["slurm_conf_options"]] == [
        ("AccountingStoragePort", "S_P_UINT16", ""), ("DefCPUPerGPU", "S_P_UINT64", ""),
        ("ExtSensorsType", "S_P_STRING", "_defunct_option"), ("PartitionName", "S_P_ARRAY", "_parse_partitionname")]


def test_release_tags_pick_the_newest_release_of_each_family() -> None:
    tags = ["slurm-22-05-9-1", "slurm-22-05-11-1", "slurm-22-05-10-1", "slurm-23-02-0-0rc1", "slurm-21-08-8-2",
            "slurm-21-08-8-1", "slurm-20-11-9-1"]
    assert generate.release_tags(tags, ("20.11", "21.08", "22.05", "23.02")) == {
        "20.11": "slurm-20-11-9-1", "21.08": "slurm-21-08-8-2", "22.05": "slurm-22-05-11-1", "23.02": None}


def test_fatal_keys() -> None:
    source = ('if (s_p_get_string(&temp_str, "SallocDefaultCommand", hashtbl))\n'
              '\t\tfatal("SallocDefaultCommand has been removed.");\n'
              'if (s_p_get_string(&x, "KeepAliveTime", hashtbl))\n\t\terror("moved");\n')
    assert generate.fatal_keys(source, ["SallocDefaultCommand", "KeepAliveTime"]) == {"SallocDefaultCommand"}


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"SchedMD's Slurm git repository is not at {MIRROR} "
                    "(a local mirror; CI does not have it)")
def test_generator_reproduces_the_committed_data_byte_for_byte() -> None:
    files = generate.generate(MIRROR)
    assert sorted(files) == ["cgroup.conf.json", "gres.conf.json", "slurm.conf.json"]
    for name, text in files.items():
        assert (generate.DATA_DIR / name).read_text() == text, f"{name} is stale: run python -m reconciler.params.generate"


def test_generator_curated_lists_are_those_the_consequence_logic_had() -> None:
    from tests.params.test_params import ALWAYS_RESTART, CORRECTED_GLOBAL, NODE_RESTART_KEYS, RESTART_BEFORE_23_11
    assert set(generate.CURATED_ALWAYS_RESTART) == ALWAYS_RESTART - CORRECTED_GLOBAL  # those in CURATED_OBSERVED_*
    assert set(generate.CURATED_RESTART_BEFORE_23_11) == RESTART_BEFORE_23_11 - CORRECTED_GLOBAL
    assert set(generate.CURATED_NODE_RESTART_KEYS) == NODE_RESTART_KEYS
