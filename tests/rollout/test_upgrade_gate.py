"""The upgrade's GPU gate words (checks/upgrade_gates.judge_gpu) on the testbed's BROKEN 570: the
probe script run by a real local shell over the testbed's STAND-IN nvidia-smi and dmesg (no GPUs here), the
broken driver loaded (its FAULTS file: GPU 0 fallen off the bus)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from reconciler.checks.gpu.query import MINORS_COMMAND, query_command
from reconciler.checks.gpu.xid import xid_command
from reconciler.checks.upgrade_gates import judge_gpu
from reconciler.drivers.slurm_reboot import failed_reason
from reconciler.facts.sections import Section, script, split_sections

REPO = Path(__file__).resolve().parents[2]
STANDINS = REPO / "deploy" / "testbed" / "standins"
BROKEN, GOOD = "570.86.15-0broken1", "550.127.05-1"
UNABLE = "Unable to determine the device handle for GPU00000000:00:06.0: Unknown Error"


def probe(tmp_path: Path, installed: str, faults: str | None) -> dict[str, Section]:
    """The gate's probe sections on a node that booted INSTALLED (its FAULTS file, if any), stand-ins on PATH."""
    loaded = tmp_path / "loaded"
    loaded.mkdir()
    (loaded / "VERSION").write_text(installed.split("-", 1)[0] + "\n")
    if faults is not None:
        (loaded / "FAULTS").write_text(faults)
    env = {"PATH": f"{STANDINS}:/usr/sbin:/usr/bin:/sbin:/bin", "RECONCILER_STANDIN_DRIVER": str(loaded),
           "RECONCILER_STANDIN_GPU_FAULTS": str(tmp_path / "no-planted-faults"), "LANG": "C.UTF-8"}
    parts = [("gpu", query_command()), ("gpu.minors", MINORS_COMMAND), ("gpu.xid", xid_command()),
             ("pkg", f"echo {installed}")]
    out = subprocess.run(["sh", "-c", script(parts)], capture_output=True, text=True, env=env, timeout=60,
                         check=True).stdout
    return split_sections(out)


def test_broken_driver_names_the_error_line_and_xid_79(tmp_path: Path) -> None:
    """nvidia-smi exit 15 with its error line, and the XID 79: never the last GPU's CSV row, whatever order
    nvidia-smi's stderr and stdout came in (both orders); the drain reason keeps the XID within its bound."""
    sections = probe(tmp_path, BROKEN, "xid79 0\n")
    gpu = sections["gpu"]
    assert gpu.rc == 15 and UNABLE in gpu.output, gpu
    rows = [line for line in gpu.output.splitlines() if line != UNABLE]
    unable_first = Section("gpu", "\n".join([rows[0], UNABLE, *rows[1:]]) + "\n", 15)  # after "# fields: new"
    for query in (gpu, unable_first):
        why = judge_gpu(None, {**sections, "gpu": query}, "nvidia-driver-standin", None)
        assert why is not None and why.startswith("gpu gate: gpus: nvidia-smi exit 15: " + UNABLE), why
        assert "xid 79 (fallen off the bus)" in why and "NVIDIA H200," not in why, why
        reason = failed_reason("0123456789abcdef" * 2, why + "; rolled back")
        assert "xid 79" in reason, reason


def test_healthy_550_passes(tmp_path: Path) -> None:
    """The same probe with the good 550 loaded and installed: the gate passes (the check above can pass)."""
    assert judge_gpu(None, probe(tmp_path, GOOD, None), "nvidia-driver-standin", None) is None
