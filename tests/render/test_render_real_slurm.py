"""Rendered slurm.conf, gres.conf and cgroup.conf parse with Debian's real slurmctld and slurmd."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.common.hostlist import expand
from reconciler.desired.loader import load_dir
from reconciler.model import DesiredState
from reconciler.render import render_file
from tests.desired_fixtures import EXAMPLE

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "scontrol")),
        reason="needs Debian's slurmctld, slurmd and slurm-client packages",
    ),
    pytest.mark.timeout(60),
]

START_TIMEOUT_S = 15


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def local_variant(state: DesiredState, tmp: Path) -> DesiredState:
    """The example made runnable on this host: local controller, files under tmp, auth/none, loopback nodes.

    Only what a standalone slurmctld needs is changed; node sets, partitions, gres, cgroup stay as they are.
    """
    data = state.model_dump(by_alias=True, exclude_none=True)
    cluster = data["cluster"]
    cluster["controllers"] = [socket.gethostname().split(".")[0]]  # Slurm compares short names
    cluster["slurm_conf"].update(
        SlurmctldPort=_free_port(),
        SlurmdPort=_free_port(),
        AuthType="auth/none",
        CredType="cred/none",
        SlurmUser=pwd.getpwuid(os.getuid()).pw_name,
        StateSaveLocation=str(tmp / "state"),
        SlurmdSpoolDir=str(tmp / "spool"),
        SlurmctldPidFile=str(tmp / "slurmctld.pid"),
        SlurmdPidFile=str(tmp / "slurmd.pid"),
        SlurmctldLogFile=str(tmp / "slurmctld.log"),
        SlurmdLogFile=str(tmp / "slurmd.log"),
    )
    for node_set in cluster["node_sets"]:  # resolving dgx01.. would take 10 s each: give loopback addresses
        count = len(expand(node_set["nodes"]))
        node_set["params"]["NodeAddr"] = f"127.0.0.[1-{count}]" if count > 1 else "127.0.0.1"
    devices = tmp / "dev"
    devices.mkdir()
    for index in range(8):  # slurmd wants character devices: links to /dev/null stand in for /dev/nvidiaN
        (devices / f"nvidia{index}").symlink_to("/dev/null")
    for line in cluster["gres"]["lines"]:
        line["file"] = line["file"].replace("/dev/", f"{devices}/")
    return DesiredState.model_validate(data)


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    """A directory with rendered slurm.conf, gres.conf and cgroup.conf of the local variant."""
    for sub in ("state", "spool"):
        (tmp_path / sub).mkdir()
    state = local_variant(load_dir(EXAMPLE).state, tmp_path)
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        (tmp_path / name).write_text(render_file(state, "dgx01", name, "test"))
    return tmp_path


def _env(conf: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(conf)}


def _scontrol(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, env=_env(conf), timeout=20, check=False
    )


@pytest.fixture
def slurmctld(conf_dir: Path) -> Iterator[Path]:
    """slurmctld running in the foreground on the rendered slurm.conf; yields the conf path."""
    conf = conf_dir / "slurm.conf"
    log = (conf_dir / "slurmctld.out").open("w")
    proc = subprocess.Popen(
        ["slurmctld", "-D", "-i", "-f", str(conf)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_env(conf),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert proc.poll() is None, (conf_dir / "slurmctld.out").read_text()
            if _scontrol(conf, "ping").returncode == 0 and _scontrol(conf, "show", "config").returncode == 0:
                break
            time.sleep(0.2)
        else:
            pytest.fail("slurmctld did not answer:\n" + (conf_dir / "slurmctld.out").read_text())
        yield conf
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def _fields(text: str) -> dict[str, str]:
    """`Key=Value` pairs of scontrol's node/partition output."""
    pairs = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            pairs[key] = value
    return pairs


def test_slurmctld_runs_on_rendered_conf(slurmctld: Path) -> None:
    """slurmctld reads every line: scontrol reports the rendered values back."""
    config = _scontrol(slurmctld, "show", "config").stdout
    settings = {
        k.strip(): v.strip() for k, _, v in (line.partition("=") for line in config.splitlines()) if _
    }
    assert settings["ClusterName"] == "dgx-pod"
    assert settings["GresTypes"] == "gpu"
    assert settings["SelectType"] == "select/cons_tres"
    assert settings["SelectTypeParameters"] == "CR_CORE_MEMORY"
    assert settings["PrologFlags"] == "Alloc,Contain"
    assert settings["Prolog"] == "/opt/apps/adm/slurm/scripts/prolog.sh"
    assert settings["HealthCheckProgram"] == "/usr/sbin/nhc"
    assert settings["ReturnToService"] == "2"
    assert settings["JobCompType"] == "jobcomp/none"

    node = _fields(_scontrol(slurmctld, "show", "node", "dgx03").stdout)
    assert node["Gres"] == "gpu:h200:8"
    assert node["CPUTot"] == "224"
    assert node["RealMemory"] == "2000000"
    assert node["AvailableFeatures"] == "h200,nvlink"
    assert node["Partitions"] == "gpu"

    gpu = _fields(_scontrol(slurmctld, "show", "partition", "gpu").stdout)
    debug = _fields(_scontrol(slurmctld, "show", "partition", "debug").stdout)
    assert (gpu["Nodes"], gpu["Default"], gpu["MaxTime"], gpu["OverSubscribe"]) == (
        "dgx[01-04]",
        "YES",
        "2-00:00:00",
        "EXCLUSIVE",
    )
    assert (debug["Nodes"], debug["MaxTime"], debug["PriorityTier"]) == ("dgx[01-02]", "01:00:00", "10")


def _slurmctld_rejects(conf: Path) -> str:
    """Run slurmctld on a broken file; return its output, asserting it stops with an error."""
    result = subprocess.run(
        ["slurmctld", "-D", "-i", "-f", str(conf)],
        capture_output=True,
        text=True,
        env=_env(conf),
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert "fatal" in result.stdout + result.stderr
    return result.stdout + result.stderr


def test_slurmctld_rejects_unknown_key(conf_dir: Path) -> None:
    """The check has teeth: an unknown key in the rendered file stops slurmctld."""
    conf = conf_dir / "slurm.conf"
    conf.write_text(conf.read_text() + "BogusKey=1\n")
    assert "unrecognized key: BogusKey" in _slurmctld_rejects(conf)


def test_slurmctld_rejects_bad_node_line(conf_dir: Path) -> None:
    """A bad value in the NodeName line is reported with the line number we expect."""
    conf = conf_dir / "slurm.conf"
    lines = conf.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("NodeName="))
    lines[index] = lines[index].replace("CPUs=224", "CPUs=lots")
    conf.write_text("\n".join(lines) + "\n")
    assert f"Parse error in file {conf} line {index + 1}" in _slurmctld_rejects(conf)


def _slurmd_gres(conf_dir: Path) -> subprocess.CompletedProcess[str]:
    conf = conf_dir / "slurm.conf"
    return subprocess.run(
        ["slurmd", "-G", "-f", str(conf), "-N", "dgx01"],
        capture_output=True,
        text=True,
        env=_env(conf),
        timeout=30,
        check=False,
    )


def test_slurmd_reads_gres_and_cgroup_conf(conf_dir: Path) -> None:
    """slurmd -G reads slurm.conf, cgroup.conf and gres.conf and reports the 8 GPUs."""
    result = _slurmd_gres(conf_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Gres Name=gpu Type=h200 Count=8" in output
    assert "error" not in output.lower(), output


@pytest.mark.parametrize("name", ["gres.conf", "cgroup.conf"])
def test_slurmd_rejects_broken_file(conf_dir: Path, name: str) -> None:
    """An unknown key in gres.conf or cgroup.conf stops slurmd: the check above would notice."""
    path = conf_dir / name
    path.write_text(path.read_text() + "Bogus=1\n")
    result = _slurmd_gres(conf_dir)
    assert result.returncode != 0
    assert "unrecognized key: Bogus" in result.stdout + result.stderr
