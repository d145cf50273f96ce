"""What an SSH import adopts, from answers as nodes give them (no SSH here; the testbed test does it for real)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from reconciler.facts.gather import GATHER_COMMAND
from reconciler.facts.models import FileFact, StatFact
from reconciler.importer import adopt
from reconciler.importer.adopt import MUNGE_KEY, NodeAnswer, Origin

CONF = {"Prolog": "/etc/slurm/prolog.d/*", "Epilog": "/etc/slurm/epilog.sh --verbose",
        "RebootProgram": "/sbin/reboot", "HealthCheckProgram": "nhc", "PlugStackConfig": "/opt/slurm/plugstack.conf",
        "ReturnToService": 2}


def fact(text: str, mode: str = "0644", owner: str = "root") -> FileFact:
    """The fact a node reports for a readable text file."""
    return FileFact(exists=True, sha256=hashlib.sha256(text.encode()).hexdigest(), mode=mode, owner=owner,
                    group="root", size=len(text), content=text)


def test_wanted_reads_the_programs_slurm_conf_names_and_the_config_dir() -> None:
    want = adopt.wanted(CONF, "/etc/slurm", ["/shared/images/"])
    assert want.globs["/etc/slurm/prolog.d/*"] == Origin("Prolog in slurm.conf", None, True)
    assert want.paths["/etc/slurm/epilog.sh"].script  # the program, not its arguments
    assert "/opt/slurm/plugstack.conf" in want.paths and "/etc/slurm/plugstack.conf" not in want.paths
    assert want.paths["/etc/slurm/topology.conf"].notify == "scontrol reconfigure"
    assert want.globs["/etc/slurm/plugstack.conf.d/*"].notify == "restart slurmd rolling"  # family unknown
    assert not any(p.startswith("/sbin") for p in want.paths)
    assert [s.split(":")[0] for s in want.skipped] == ["HealthCheckProgram=nhc", "RebootProgram=/sbin/reboot"]
    req = adopt.request(want)
    assert req.hashes == [MUNGE_KEY] and MUNGE_KEY not in req.files
    assert req.globs == {"/etc/slurm/prolog.d/*": "files", "/etc/slurm/plugstack.conf.d/*": "files",
                         "/shared/images/*.sqsh": "stats"}


def test_the_fact_script_expands_globs_on_the_node(tmp_path: Path) -> None:
    """The real remote script (run here with python3): globbed files read whole, images stat-only."""
    (tmp_path / "prolog.d").mkdir()
    (tmp_path / "prolog.d" / "10-a.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "prolog.d" / "sub").mkdir()  # a directory is not a file to adopt
    (tmp_path / "img.sqsh").write_bytes(b"\0" * 100)
    want = adopt.Wanted(globs={str(tmp_path / "prolog.d" / "*"): Origin("Prolog in slurm.conf", script=True)},
                        image_dirs=[str(tmp_path)])
    proc = subprocess.run(["sh", "-c", GATHER_COMMAND], input=adopt.request(want).encode(), capture_output=True,
                          text=True, check=True)
    answer = adopt.parse_answer(json.loads(proc.stdout))
    script = str(tmp_path / "prolog.d" / "10-a.sh")
    assert answer.globs[str(tmp_path / "prolog.d" / "*")] == [script]
    assert answer.files[script].content == "#!/bin/sh\nexit 0\n"
    assert answer.stats[str(tmp_path / "img.sqsh")].size == 100
    assert str(tmp_path / "img.sqsh") not in answer.files


def test_parse_answer_reads_systemd_or_supervisord() -> None:
    systemd = adopt.parse_answer({"files": {}, "commands": {
        "systemd": {"stdout": "inactive\nactive\ninactive\nactive\ninactive\ninactive\n"},
        "supervisord": {"stdout": ""}, "luac": {"stdout": "/usr/bin/luac\n"}}})
    assert systemd.manager == "systemd" and systemd.luac
    assert {n for n, f in systemd.services.items() if f.running} == {"slurmd", "munge"}
    supervised = adopt.parse_answer({"files": {}, "commands": {
        "systemd": {"stdout": ""}, "luac": {"stdout": ""},
        "supervisord": {"stdout": "munge RUNNING pid 5, uptime 0:01:00\nslurmd STOPPED Not started\n"}}})
    assert supervised.manager == "supervisord" and not supervised.luac
    assert {n for n, f in supervised.services.items() if f.running} == {"munge"}


def test_identical_copies_fold_and_differing_ones_get_their_own_entry() -> None:
    script = "#!/usr/bin/env bash\nexit 0\n"
    want = adopt.Wanted(paths={"/etc/slurm/prolog.sh": Origin("Prolog in slurm.conf", script=True)})
    answers = {f"gpu0{i}": NodeAnswer(files={"/etc/slurm/prolog.sh": fact(script, "0755")}) for i in range(1, 5)}
    answers["gpu03"].files["/etc/slurm/prolog.sh"] = fact(script + "# local\n", "0755")
    answers["gpu04"].files["/etc/slurm/prolog.sh"] = fact(script, "0700")
    answers["gpu05"] = NodeAnswer()  # no such file there: not in any node set
    out = adopt.adopt(answers, want, ["ctl"], set(answers))
    entries = out.docs["files.yaml"]["files"]
    assert [(e["nodes"], e["mode"], e["source"]) for e in entries] == [
        ("gpu[01-02]", "0755", "files/etc/slurm/prolog.sh"),
        ("gpu03", "0755", "files/etc/slurm/prolog.sh@gpu03"),
        ("gpu04", "0700", "files/etc/slurm/prolog.sh@gpu04")]
    assert {e["validate"] for e in entries} == {"bash -n %s"}
    assert out.sources["files/etc/slurm/prolog.sh@gpu03"] == (script + "# local\n").encode()


def test_binary_and_unread_files_are_not_adopted() -> None:
    want = adopt.Wanted(paths={"/usr/local/sbin/resume": Origin("ResumeProgram in slurm.conf", script=True)})
    binary = FileFact(exists=True, sha256="0" * 64, mode="0755", owner="root", group="root", content="\ufffdELF")
    big = FileFact(exists=True, sha256="1" * 64, mode="0755", owner="root", group="root", content=None)
    out = adopt.adopt({"ctl": NodeAnswer(files={"/usr/local/sbin/resume": binary}),
                       "ctl2": NodeAnswer(files={"/usr/local/sbin/resume": big})}, want, ["ctl"], set())
    assert "files.yaml" not in out.docs and not out.sources
    assert len(out.warnings) == 2 and all("not adopted" in w for w in out.warnings)


def test_validate_by_shebang_and_lua_only_where_luac_is() -> None:
    script = Origin("x", script=True)
    assert adopt._validate_for("#!/bin/sh\n", "/x", script, False) == "sh -n %s"
    assert adopt._validate_for("#!/bin/bash -e\n", "/x", script, False) == "bash -n %s"
    assert adopt._validate_for("#!/usr/bin/python3\n", "/x", script, False) is None
    assert adopt._validate_for("#!/bin/sh\n", "/etc/slurm/oci.conf", Origin("x"), False) is None
    assert adopt._validate_for("-- lua\n", "/etc/slurm/job_submit.lua", script, True) == "luac -p %s"
    assert adopt._validate_for("-- lua\n", "/etc/slurm/job_submit.lua", script, False) is None


@pytest.mark.parametrize(("family", "configless", "notify"), [
    ("22.05", False, "restart slurmd rolling"), ("23.02", False, "restart slurmd rolling"),
    ("23.11", False, "scontrol reconfigure"), ("24.11", False, "scontrol reconfigure"),
    ("22.05", True, "scontrol reconfigure"), ("24.11", True, "scontrol reconfigure")])
def test_plugstack_follows_spank_8_and_configless(family: str, configless: bool, notify: str) -> None:
    """Claimed before: nothing (each job step reads plugstack.conf afresh). spank.8 (22.05, 24.11): plugins loaded in
    slurmd's context persist while slurmd runs, slurmd must be restarted; from 23.11 reconfigure re-executes slurmd
    (scontrol.1 23.11); configless: only reconfigure (or a restart) refreshes slurmd's copy."""
    conf = {"SlurmctldParameters": "enable_configless"} if configless else {}
    want = adopt.wanted(conf, "/etc/slurm", [], family)
    assert want.paths["/etc/slurm/plugstack.conf"].notify == notify
    assert want.globs["/etc/slurm/plugstack.conf.d/*"].notify == notify
    assert ("slurmd-context plugins" in want.paths["/etc/slurm/plugstack.conf"].why) is (configless and
                                                                                      family == "22.05")
    text = "required /usr/lib/slurm/spank_pyxis.so\n"
    answers = {n: NodeAnswer(files={"/etc/slurm/plugstack.conf": fact(text)}) for n in ("ctl", "gpu01", "gpu02")}
    entries = adopt.adopt(answers, want, ["ctl"], {"gpu01", "gpu02"}).docs["files.yaml"]["files"]
    if notify == "scontrol reconfigure":
        assert [(e["nodes"], e.get("notify")) for e in entries] == [("ctl,gpu[01-02]", [notify])]
    else:  # the controller runs no slurmd: its copy (read by srun there) needs nothing
        assert [(e["nodes"], e.get("notify")) for e in entries] == [("gpu[01-02]", [notify]), ("ctl", None)]


def test_munge_key_fingerprint_only_and_key_file_checked(tmp_path: Path) -> None:
    key = tmp_path / "munge.key"
    key.write_bytes(b"k" * 1024)
    sha = hashlib.sha256(key.read_bytes()).hexdigest()
    munge = FileFact(exists=True, sha256=sha, mode="0400", owner="munge", group="munge")
    answers = {n: NodeAnswer(files={MUNGE_KEY: munge}) for n in ("ctl", "gpu01")}
    matched = adopt.adopt(answers, adopt.Wanted(), ["ctl"], {"gpu01"}, key)
    assert dict(matched.docs["munge.yaml"]["munge"]) == {"key_file": str(key)} and matched.munge_note is None
    note = adopt.adopt(answers, adopt.Wanted(), ["ctl"], {"gpu01"})
    assert "munge.yaml" not in note.docs and f"sha256:{sha} on ctl,gpu01" in (note.munge_note or "")
    other = tmp_path / "other.key"
    other.write_bytes(b"x" * 1024)
    wrong = adopt.adopt(answers, adopt.Wanted(), ["ctl"], {"gpu01"}, other)
    assert "munge.yaml" not in wrong.docs and any("is not the nodes' munge key" in w for w in wrong.warnings)
    answers["gpu01"] = NodeAnswer(files={MUNGE_KEY: munge.model_copy(update={"sha256": "f" * 64})})
    split = adopt.adopt(answers, adopt.Wanted(), ["ctl"], {"gpu01"})
    assert any("differs between nodes" in w for w in split.warnings)


def test_services_and_images() -> None:
    answers = {
        "ctl": adopt.parse_answer({"files": {}, "stats": {"/img/a.sqsh": {"exists": True, "size": 5}},
                                   "commands": {"supervisord": {"stdout": "slurmctld RUNNING x\nmunge RUNNING y\n"}}}),
        "gpu01": adopt.parse_answer({"files": {}, "stats": {"/img/a.sqsh": {"exists": True, "size": 5},
                                                            "/img/b.sqsh": {"exists": True, "size": 7}},
                                     "commands": {"supervisord": {"stdout": "slurmd RUNNING\nmunge RUNNING\n"}}}),
    }
    out = adopt.adopt(answers, adopt.Wanted(image_dirs=["/img"]), ["ctl"], {"gpu01"})
    assert [dict(e) for e in out.docs["services.yaml"]["services"]] == [
        {"name": "slurmctld", "nodes": "ctl", "state": "running"},
        {"name": "munge", "nodes": "ctl,gpu01", "state": "running"},
        {"name": "slurmd", "nodes": "gpu01", "state": "running"}]
    assert [dict(e) for e in out.docs["images.yaml"]["images"]] == [
        {"path": "/img/a.sqsh", "import_on": "ctl"}, {"path": "/img/b.sqsh", "import_on": "gpu01"}]
    assert out.managers == {"ctl": "supervisord", "gpu01": "supervisord"}
    empty = StatFact(exists=True, size=0)
    answers["ctl"].stats = {"/img/c.sqsh": empty}
    answers["gpu01"].stats = {}
    assert "images.yaml" not in adopt.adopt(answers, adopt.Wanted(image_dirs=["/img"]), ["ctl"], set()).docs
