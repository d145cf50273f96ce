"""Node check judges, data-driven: tests/checks/probes/<judge>/<case>.json holds probe output -> item.

Cases named `real_*` (and `h100_device_probe.txt`) hold output recorded on the GPU device machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.checks.node import (
    Item,
    Probes,
    judge_gpus,
    judge_image,
    judge_mount,
    judge_node_check,
    judge_services,
    judge_slurm_state,
    node_result,
    probe_command,
)
from reconciler.checks.slurm_view import SlurmView, parse_view
from reconciler.facts.sections import Section, split_sections
from reconciler.model import GpuExpectation, NodeCheck, ServiceManager

HERE = Path(__file__).parent / "probes"
CASES = sorted((p.parent.name, p) for p in HERE.glob("*/*.json"))


def _section(name: str, output: str | None, rc: int | None) -> Section | None:
    return None if output is None else Section(name, output, rc)


def _view(case: dict[str, Any]) -> SlurmView:
    if case.get("view_error"):
        return SlurmView(error=case["view_error"])
    text = f"@@reconciler-begin nodes\n{case['scontrol']}@@reconciler-end nodes 0\n" \
           "@@reconciler-begin jobs\n@@reconciler-end jobs 0\n"
    return parse_view(text)


def judge(kind: str, case: dict[str, Any]) -> list[Item]:
    if kind == "gpus":
        return [judge_gpus(GpuExpectation(**case["expect"]), Section("gpu", case["output"], case["rc"]))]
    if kind == "mount":
        return [judge_mount(case["path"], Section("mountinfo", case["mountinfo"], 0),
                            Section("write.0", case["write_output"], case["write_rc"]))]
    if kind == "services":
        return judge_services(case["services"], ServiceManager(**case["manager"]),
                              Section("services", case["output"], 0))
    if kind == "image":
        return [judge_image(case["path"], Section("image.0", case["output"], case["rc"]))]
    if kind == "slurm_state":
        return [judge_slurm_state(case["node"], case["accepted"], _view(case))]
    raise AssertionError(kind)


@pytest.mark.parametrize(("kind", "path"), CASES, ids=[f"{k}/{p.stem}" for k, p in CASES])
def test_probe_case(kind: str, path: Path) -> None:
    case = json.loads(path.read_text())
    items = judge(kind, case)
    expected = case.get("items") or [{"status": case["status"], "message": case["message"]}]
    assert [{"status": i.status, "message": i.message} for i in items] == expected


def test_every_judge_has_cases() -> None:
    assert {k for k, _ in CASES} == {"gpus", "mount", "services", "image", "slurm_state"}


def test_probe_command_has_one_section_per_probe() -> None:
    probes = Probes(gpu=True, mounts=["/shared", "/scratch dir"], services=["munge", "slurmd"],
                    images=["/shared/a.sqsh"])
    command = probe_command(probes, ServiceManager(type="supervisord"))
    names = [line.split()[2].rstrip("';") for line in command.splitlines() if line.startswith("echo '@@reconciler-begin")]
    assert names == ["hostname", "gpu", "gpu.ecc", "gpu.pcie", "mountinfo", "write.0", "write.1", "services", "image.0"]
    assert "sh '/scratch dir'" in command  # paths are quoted
    assert "supervisorctl status || true" in command
    assert "nvidia-smi --query-gpu=index,name,pci.bus_id," in command and "--format=csv,noheader,nounits" in command


def test_real_device_probe_output_judged_as_a_whole() -> None:
    """The probe script, run as is on the H100 device machine, parsed and judged for one check."""
    output = (HERE / "h100_device_probe.txt").read_text()
    sections = split_sections(output)
    assert sections["hostname"].lines == ["vm"]
    check = NodeCheck(name="gpu-node", nodes="vm", gpus=GpuExpectation(count=1, model="H100", driver="580."),
                      mounts=["/tmp", "/sys"], images=True)
    probes = Probes(gpu=True, mounts=["/tmp", "/sys"], images=["/nonexistent.sqsh"])
    items = judge_node_check(check, "vm", sections, probes, ServiceManager(), ["/nonexistent.sqsh"], SlurmView())
    assert [(i.name, i.status) for i in items] == [
        ("gpus", "pass"), ("mount /tmp", "fail"), ("mount /sys", "fail"), ("image /nonexistent.sqsh", "fail")]
    result = node_result(check, "vm", items)
    assert not result.ok and not result.error and result.failed
    assert result.message == ("mount /tmp: not mounted; mount /sys: not writable: Permission denied; "
                              "image /nonexistent.sqsh: missing (No such file or directory)")
    assert result.details[0] == "pass: 1x NVIDIA H100 80GB HBM3 (driver 580.159.04)"


def test_sections_survive_output_without_final_newline_and_cut_off_output() -> None:
    text = ("@@reconciler-begin a\nx\nlast@@reconciler-end a 3\n"
            "@@reconciler-begin b\npartial")
    sections = split_sections(text)
    assert sections["a"] == Section("a", "x\nlast\n", 3)
    assert sections["b"].rc is None and sections["b"].lines == ["partial"]


def test_result_is_error_not_fail_when_only_unknowns() -> None:
    check = NodeCheck(name="c", nodes="gpu01", slurm_state=["IDLE"])
    items = [Item("slurm state", "error", "slurm state: unknown (x)"), Item("gpus", "pass", "8x H200")]
    result = node_result(check, "gpu01", items)
    assert (result.ok, result.error, result.failed, result.status) == (False, True, False, "ERROR")
    assert result.message == "slurm state: unknown (x)"
