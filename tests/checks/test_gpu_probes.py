"""GPU health probes: each parser and judge on REAL recorded outputs (healthy) and on EDITED COPIES (faults).

Real outputs: tests/fixtures/gpu/h100-x1-2026-11-25/ and h200-x1-2026-11-25/ (the probe script run on the device
machine), tests/fixtures/gpu/public/ (public recordings, origins in its README). A planted fault is a copy of
a real output with named cells or lines edited (`planted_row`, `with_line`), never an invented output.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from reconciler.checks.gpu import judge
from reconciler.checks.gpu.dcgm import parse_diag
from reconciler.checks.gpu.infiniband import ib_command, parse_ports
from reconciler.checks.gpu.nvlink import parse_nvlink
from reconciler.checks.gpu.query import FIELDS, parse_minors, parse_query, query_command
from reconciler.checks.gpu.xid import XidMemory, acknowledged, judge_events, parse_xids
from reconciler.checks.node import Probes, judge_gpu_health, judge_node_check, node_result, remembered
from reconciler.checks.slurm_view import SlurmView
from reconciler.facts.sections import Section, split_sections
from reconciler.model import GpuExpectation, IbExpectation, NodeCheck, ServiceManager

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "tests" / "fixtures" / "gpu"
H100 = GPU / "h100-x1-2026-11-25"
H200 = GPU / "h200-x1-2026-11-25"
H200X4 = GPU / "h200-x4-2026-11-26"
PUBLIC = GPU / "public"
STANDIN = REPO / "deploy" / "testbed" / "standins" / "nvidia-smi"
PROBES = Probes(gpu=True, xid=True, nvlink=True, ib=True)


def device_sections(machine: Path) -> dict[str, Section]:
    """The sections of the probe script as run on a device machine."""
    return split_sections((machine / "probe-output.txt").read_text())


def planted_row(machine: Path, **cells: str) -> Section:
    """The device's real `gpu` section with named cells edited (field name with '.' written as '__')."""
    sec = device_sections(machine)["gpu"]
    marker, row = sec.output.strip().splitlines()
    fields = FIELDS[marker.split(": ")[1]]
    values = [v.strip() for v in row.split(",")]
    for name, value in cells.items():
        values[fields.index(name.replace("__", "."))] = value
    return Section("gpu", f"{marker}\n{', '.join(values)}\n", 0)


def old_fields_row(machine: Path) -> Section:
    """The old field list as the probe asks an older driver (`clocks_throttle_reasons.active`, no fabric.*):
    recorded on the H200 (query-old-fields.txt); on the H100, the real new row cut to the old list (the same
    values in the same order: h100 query-old-throttle.csv shows the old name answering 0x...01 too)."""
    if (machine / "query-old-fields.txt").exists():
        return Section("gpu", (machine / "query-old-fields.txt").read_text(), 0)
    sec = device_sections(machine)["gpu"]
    _, row = sec.output.strip().splitlines()
    values = [v.strip() for v in row.split(",")][: len(FIELDS["old"])]
    return Section("gpu", "# fields: old\n" + ", ".join(values) + "\n", 0)


FULL = GpuExpectation(count=1, model="H", driver="580.", max_temperature=85, pcie={"gen": 5, "width": 16},
                      ecc=True, fabric_manager=False)


# ---------------------------------------------------------------- the query


@pytest.mark.parametrize("machine,model,memory", [(H100, "NVIDIA H100 80GB HBM3", 81559), (H200, "NVIDIA H200", 143771)])
def test_real_query_rows_parse_to_typed_values(machine: Path, model: str, memory: int) -> None:
    query = parse_query(device_sections(machine)["gpu"].output)
    assert query.fields == "new" and query.other == []
    [row] = query.rows
    assert (row.index, row.name, row.driver, row.bus) == (0, model, "580.159.04", "0000:00:06")
    assert (row.ecc_mode, row.ecc_volatile, row.remap_pending, row.retired_pending) == ("Enabled", 0, "No", None)
    assert (row.pcie_gen, row.pcie_width, row.memory_mib, row.reason_names) == (5, 16, memory, ["gpu-idle"])
    assert row.fabric_state is None  # N/A: no NVSwitch fabric on these machines


@pytest.mark.parametrize("machine", [H100, H200])
@pytest.mark.parametrize("fields", ["new", "old"])
def test_real_healthy_gpu_passes_every_item(machine: Path, fields: str) -> None:
    sec = device_sections(machine)["gpu"] if fields == "new" else old_fields_row(machine)
    items, query = judge.query_items(FULL, sec)
    assert query is not None and query.fields == fields
    assert [(i.name, i.status) for i in items] == [("gpus", "pass")]


PLANTED = [
    ({"ecc__errors__uncorrected__volatile__total": "4"}, "gpu 0 ecc 4 uncorrected errors since the last reset"),
    ({"remapped_rows__failure": "Yes"}, "gpu 0 row-remap failure (no spare rows left)"),
    ({"remapped_rows__pending": "Yes"}, "gpu 0 row-remap pending (reset the GPU)"),
    ({"retired_pages__pending": "Yes"}, "gpu 0 retired-pages pending (reset the GPU)"),
    ({"REASONS": "0x0000000000000048"}, "gpu 0 clocks held down: hw-slowdown, hw-thermal-slowdown"),
    ({"ecc__mode__current": "Disabled"}, "gpu 0 ecc-mode disabled, expected enabled"),
    ({"temperature__gpu": "91"}, "gpu 0 temperature 91 C, max 85"),
    ({"pcie__link__width__current": "8"}, "gpu 0 pcie gen5 x8, expected gen5 x16"),
    # busy (not idle) at Gen3: the link trained low; idle it may step down, so Gen3 while idle passes
    ({"REASONS": "0x0000000000000000", "pcie__link__gen__current": "3"}, "gpu 0 pcie gen3 x16, expected gen5 x16"),
]


@pytest.mark.parametrize("machine", [H100, H200])
@pytest.mark.parametrize("fields", ["new", "old"])
@pytest.mark.parametrize("edit,message", PLANTED, ids=[m.split(" ", 2)[2].split()[0] + str(i)
                                                      for i, (_, m) in enumerate(PLANTED)])
def test_planted_fault_in_a_real_row_fails_with_gpu_and_kind(machine: Path, fields: str, edit: dict[str, str],
                                                             message: str) -> None:
    if fields == "new":
        sec = planted_row(machine, **{("clocks_event_reasons__active" if k == "REASONS" else k): v
                                      for k, v in edit.items()})
    else:
        marker, row = old_fields_row(machine).output.strip().splitlines()
        values = [v.strip() for v in row.split(",")]
        for name, value in edit.items():
            field = "clocks_throttle_reasons.active" if name == "REASONS" else name.replace("__", ".")
            values[FIELDS["old"].index(field)] = value
        sec = Section("gpu", f"{marker}\n{', '.join(values)}\n", 0)
    items, _ = judge.query_items(FULL, sec)
    faults = [i for i in items if not i.ok]
    assert [i.message for i in faults] == [message]
    assert judge.fault_of(message) == ("0", message.split()[2])


def test_idle_gpu_stepped_down_to_gen1_passes() -> None:
    sec = planted_row(H200, pcie__link__gen__current="1")  # real row: idle bit set
    assert [i.status for i in judge.query_items(FULL, sec)[0]] == ["pass"]


def test_fabric_registration_must_complete_on_nvswitch_systems() -> None:
    want = FULL.model_copy(update={"fabric_manager": True})
    healthy = planted_row(H200, fabric__state="Completed", fabric__status="Success")
    assert [i.status for i in judge.query_items(want, healthy)[0]] == ["pass"]
    stuck = planted_row(H200, fabric__state="In Progress")
    assert [i.message for i in judge.query_items(want, stuck)[0] if not i.ok] == [
        "gpu 0 fabric registration In Progress"]
    # the real N/A of a machine without NVSwitch says nothing either way
    assert [i.status for i in judge.query_items(want, device_sections(H200)["gpu"])[0]] == ["pass"]


def test_public_fabric_section_of_an_nvswitch_h100_reads_completed_success() -> None:
    text = (PUBLIC / "smi-q-fabric-h100-535.161.08-gpud.txt").read_text()
    fabric = text[text.index("Fabric"):].splitlines()[:3]
    assert "Completed" in fabric[1] and "Success" in fabric[2]


def test_query_falls_back_to_the_old_field_names_when_the_driver_refuses_a_new_one(tmp_path: Path) -> None:
    """The real shell text against the testbed's STAND-IN nvidia-smi in old-driver mode, which refuses
    clocks_event_reasons.* and fabric.* with the real message (h200 invalid-field.txt: `Field "..." is not a
    valid field to query.`, exit 2)."""
    assert (H200 / "invalid-field.txt").read_text().startswith('Field "no_such_field.active" is not a valid field')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(STANDIN)
    faults = tmp_path / "faults"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECONCILER_STANDIN_GPU_FAULTS": str(faults)}
    for mode, fields in (("", "new"), ("old-driver\n", "old")):
        faults.write_text(mode)
        done = subprocess.run(["sh", "-c", query_command()], capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        query = parse_query(done.stdout)
        assert query.fields == fields and len(query.rows) == 8 and query.other == []
        assert [r.bus for r in query.rows][:2] == ["0000:00:06", "0000:00:07"]
        assert all(r.reasons == 1 for r in query.rows)


def test_no_nvidia_smi_and_a_failing_one() -> None:
    want = GpuExpectation(count=8)
    [item], _ = judge.query_items(want, Section("gpu", "nvidia-smi: command not found\n", 127))
    assert item.message == "gpus: nvidia-smi not found (expected 8 GPUs)"
    failing = Section("gpu", "# fields: new\nNo devices were found\n", 6)
    [item], _ = judge.query_items(want, failing)
    assert item.message == "gpus: nvidia-smi failed (exit 6): No devices were found"


def test_device_minors_map_bus_to_index() -> None:
    assert parse_minors(device_sections(H200)["gpu.minors"].output) == {"0000:00:06": 0}


# ---------------------------------------------------------------- XIDs


def test_real_boot_log_has_no_xid_and_passes() -> None:
    sec = device_sections(H200)["gpu.xid"]
    log = parse_xids(sec.output)
    assert log.boot and log.events == []
    items, memory, _ = judge.xid_items(FULL, sec, XidMemory(), {})
    assert [(i.name, i.status) for i in items] == [("gpu xids", "pass")]
    assert memory.boot == log.boot and memory.seen_until is None


@pytest.mark.parametrize("name,xids,fatal", [
    ("dmesg-xid-79-ogkm-1151.txt", [79], True),
    ("dmesg-xid-48-63-94-gpud.txt", [48, 63, 94], True),
    ("dmesg-xid-119-gpud.txt", [119], True),
    ("dmesg-xid-13-43-gpud.txt", [13, 43], False),
    ("dmesg-fallen-off-bus-no-xid-nvsentinel-155.txt", [], False),
])
def test_public_kernel_logs_xids_found_in_every_time_format(name: str, xids: list[int], fatal: bool) -> None:
    """dmesg with [seconds], with -T dates, --time-format iso, and the journal: all read."""
    log = parse_xids("boot 1111-2222-3333\n" + (PUBLIC / name).read_text())
    assert sorted({e.xid for e in log.events}) == xids
    verdict = judge_events(log, XidMemory(), set(), {})
    assert bool(verdict.fatal) is fatal


def with_line(machine: Path, line: str) -> Section:
    """The device's real xid section with one kernel line added (an edited copy)."""
    sec = device_sections(machine)["gpu.xid"]
    return Section("gpu.xid", sec.output + line + "\n", 0)


XID79 = "[ 8123.456789] NVRM: Xid (PCI:0000:00:06): 79, pid=0, GPU has fallen off the bus."
XID13 = ("[ 8200.000001] NVRM: Xid (PCI:0000:00:06): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
         "Exception on (GPC 8, TPC 5, SM 0): Out Of Range Address")


def test_planted_xid_79_fails_naming_the_gpu_until_acknowledged_or_rebooted() -> None:
    sec = with_line(H200, XID79)
    buses = {"0000:00:06": 3}
    items, memory, _ = judge.xid_items(FULL, sec, XidMemory(), buses)
    assert [(i.status, i.message) for i in items] == [("fail", "gpu 3 xid 79 (fallen off the bus)")]
    # still in this boot's log at the next check: still failing (the GPU needs a reset)
    items, memory, _ = judge.xid_items(FULL, sec, memory, buses)
    assert [i.message for i in items if not i.ok] == ["gpu 3 xid 79 (fallen off the bus)"]
    # acknowledged after a reset: passes; a new XID 79 after that fails again
    items, _, _ = judge.xid_items(FULL, sec, acknowledged(memory), buses)
    assert all(i.ok for i in items)
    again = Section("gpu.xid", sec.output + XID79.replace("8123.456789", "9000.000000") + "\n", 0)
    items, _, _ = judge.xid_items(FULL, again, acknowledged(memory), buses)
    assert [i.message for i in items if not i.ok] == ["gpu 3 xid 79 (fallen off the bus)"]
    # another boot: the acknowledgement and the cursor are of the old boot
    rebooted = Section("gpu.xid", sec.output.replace(memory.boot or "", "99999999-0000-0000-0000-000000000000"), 0)
    items, fresh, _ = judge.xid_items(FULL, rebooted, acknowledged(memory), buses)
    assert [i.status for i in items] == ["fail"] and fresh.boot.startswith("99999999")


def test_warning_xid_reported_once_and_ignored_xids_never() -> None:
    sec = with_line(H200, XID13)
    items, memory, _ = judge.xid_items(FULL, sec, XidMemory(), {"0000:00:06": 0})
    assert [(i.status, i.message) for i in items] == [
        ("pass", "gpu 0 xid 13 (graphics engine exception): warning, new")]
    items, _, _ = judge.xid_items(FULL, sec, memory, {"0000:00:06": 0})
    assert [(i.name, i.status) for i in items] == [("gpu xids", "pass")]
    quiet = FULL.model_copy(update={"xid_ignore": [79]})
    items, _, _ = judge.xid_items(quiet, with_line(H200, XID79), XidMemory(), {})
    assert all(i.ok for i in items)


def test_fallen_gpu_named_by_its_remembered_index_when_the_query_lost_it() -> None:
    """XID 79: the GPU is gone from nvidia-smi; the bus -> index map of an earlier check names it."""
    earlier = remembered(device_sections(H200), XidMemory())
    assert earlier.buses == {"0000:00:06": 0}
    lost = {"gpu": Section("gpu", "# fields: new\nUnable to determine the device handle for GPU0000:00:06.0: "
                                  "Unknown Error\n", 15),
            "gpu.minors": Section("gpu.minors", "", 0), "gpu.xid": with_line(H200, XID79)}
    items = judge_gpu_health(GpuExpectation(count=1, model="H200"), lost, PROBES, earlier)
    failed = [i for i in items if not i.ok]
    assert [i.message for i in failed] == ["gpu 0 xid 79 (fallen off the bus)",
                                           "gpus: nvidia-smi failed (exit 15): Unable to determine the device handle "
                                           "for GPU0000:00:06.0: Unknown Error"]
    check = NodeCheck(name="gpu-health", nodes="vm", gpus=GpuExpectation(count=1))
    result = node_result(check, "vm", items)
    assert result.message.startswith("gpu 0 xid 79 (fallen off the bus); gpus: nvidia-smi failed")


# ---------------------------------------------------------------- NVLink


def test_public_a100_nvlink_all_twelve_links_up() -> None:
    links = parse_nvlink((PUBLIC / "nvlink-s-a100-sxm4-80gb-8gpu-gpud.txt").read_text())
    assert sorted(links) == list(range(8)) and {g.active for g in links.values()} == {12}
    want = GpuExpectation(count=8, nvlinks=12, nvlink_speed=25)
    sec = Section("gpu.nvlink", (PUBLIC / "nvlink-s-a100-sxm4-80gb-8gpu-gpud.txt").read_text(), 0)
    assert [(i.status, i.message) for i in judge.nvlink_items(want, sec, None)] == [
        ("pass", "nvlink: 8 GPU(s), links up")]


def test_public_h100_pcie_pair_with_inactive_links_fails_each_gpu() -> None:
    sec = Section("gpu.nvlink", (PUBLIC / "nvlink-s-h100-pcie-2gpu-inactive-hpe.txt").read_text(), 0)
    items = judge.nvlink_items(GpuExpectation(count=2, nvlinks=18), sec, None)
    assert [i.message for i in items] == ["gpu 0 nvlink 12 of 18 links up (6 inactive)",
                                          "gpu 1 nvlink 12 of 18 links up (6 inactive)"]
    assert all(i.ok for i in judge.nvlink_items(GpuExpectation(count=2, nvlinks=12), sec, None))


def test_planted_inactive_link_and_slow_link_in_the_real_a100_output() -> None:
    real = (PUBLIC / "nvlink-s-a100-sxm4-80gb-8gpu-gpud.txt").read_text()
    gpu5 = real.index("GPU 5:")
    link3 = real.index("Link 3: 25 GB/s", gpu5)
    edited = real[:link3] + "Link 3: <inactive>" + real[link3 + len("Link 3: 25 GB/s"):]
    items = judge.nvlink_items(GpuExpectation(count=8, nvlinks=12), Section("gpu.nvlink", edited, 0), None)
    assert [i.message for i in items] == ["gpu 5 nvlink 11 of 12 links up (1 inactive)"]
    slow = real[:link3] + "Link 3: 12.5 GB/s" + real[link3 + len("Link 3: 25 GB/s"):]
    items = judge.nvlink_items(GpuExpectation(count=8, nvlink_speed=25), Section("gpu.nvlink", slow, 0), None)
    assert [i.message for i in items] == ["gpu 5 nvlink link 3 at 12.5 GB/s, expected 25"]


def test_real_single_gpu_machine_has_no_nvlink() -> None:
    sec = device_sections(H100)["gpu.nvlink"]
    assert sec.rc == 0 and parse_nvlink(sec.output) == {}
    query = parse_query(device_sections(H100)["gpu"].output)
    assert [i.message for i in judge.nvlink_items(GpuExpectation(count=1, nvlinks=18), sec, query)] == [
        "gpu 0 nvlink 0 of 18 links up"]


# ---------------------------------------------------------------- InfiniBand


def sysfs_tree(fixture: Path, root: Path, edits: dict[str, str] | None = None) -> Path:
    """A /sys/class/infiniband tree from a `path: content` recording (with EDITS applied to a copy)."""
    for line in fixture.read_text().splitlines():
        if line.startswith("#") or ": " not in line:
            continue
        path, content = line.split(": ", 1)
        content = (edits or {}).get(path, content)
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content + "\n")
    return root


def run_ib(root: Path) -> Section:
    """The probe's real shell text over a sysfs tree."""
    done = subprocess.run(["sh", "-c", ib_command(str(root))], capture_output=True, text=True, check=False)
    return Section("ib", done.stdout + done.stderr, done.returncode)


IB_WANT = IbExpectation(ports=8, rate=400, link_layer="InfiniBand")


def test_real_h100_node_eight_ndr_ports_up(tmp_path: Path) -> None:
    sec = run_ib(sysfs_tree(PUBLIC / "ib-sysfs-gpud-h100.txt", tmp_path))
    ports = parse_ports(sec.output)
    assert len([p for p in ports if p.link_layer == "InfiniBand"]) == 8
    assert [(i.status, i.message) for i in judge.ib_items(IB_WANT, sec)] == [
        ("pass", "ib: 8 port(s) up (400 Gb/sec (4X NDR))")]


def test_planted_port_down_and_slow_port_fail(tmp_path: Path) -> None:
    edits = {"mlx5_4/ports/1/state": "1: DOWN", "mlx5_4/ports/1/phys_state": "2: Polling",
             "mlx5_5/ports/1/rate": "200 Gb/sec (4X HDR)"}
    sec = run_ib(sysfs_tree(PUBLIC / "ib-sysfs-gpud-h100.txt", tmp_path, edits))
    assert [i.message for i in judge.ib_items(IB_WANT, sec)] == [
        "ib: 6 of 8 ports up", "ib mlx5_4/1 DOWN (Polling)", "ib mlx5_5/1 rate 200 Gb/sec (4X HDR), expected 400 Gb/sec"]


def test_public_node_exporter_qdr_ports_and_a_node_without_ib(tmp_path: Path) -> None:
    sec = run_ib(sysfs_tree(PUBLIC / "ib-sysfs-node-exporter.txt", tmp_path))
    assert [p.rate for p in parse_ports(sec.output) if p.device == "mlx4_0"] == [40.0, 40.0]
    empty = device_sections(H100)["ib"]
    assert [i.message for i in judge.ib_items(IbExpectation(ports=1), empty)] == [
        "ib: 0 of 1 ports up (no ports in /sys/class/infiniband)"]
    assert judge.ib_items(IbExpectation(ports=0), empty)[0].ok


# ---------------------------------------------------------------- DCGM and NHC


def test_public_dcgm_tables_pass_and_fail() -> None:
    passing = Section("dcgm", (PUBLIC / "dcgmi-diag-r3-partial-dcgm-55.txt").read_text(), 0)
    assert len(parse_diag(passing.output)) == 9
    assert judge.dcgm_item(3, passing).message == "dcgm level 3: 9 passed"
    failing = Section("dcgm", (PUBLIC / "dcgmi-diag-r2-fail-nvlink-down-partial-dcgm-49.txt").read_text(), 226)
    item = judge.dcgm_item(2, failing)
    assert item.status == "fail" and item.message == "gpu dcgm level 2 failed: PCIe All"
    assert judge.fault_of(item.message) == ("", "dcgm")
    missing = judge.dcgm_item(1, Section("dcgm", "dcgmi: command not found\n", 127))
    assert missing.status == "error"


def test_public_nhc_verdicts() -> None:
    ok = judge.nhc_item(Section("nhc", (PUBLIC / "nhc-pass-nhc-pr152.txt").read_text(), 0))
    assert ok.ok
    three = judge.nhc_item(Section("nhc", (PUBLIC / "nhc-fail-3checks-nhc-pr152.txt").read_text(), 3))
    assert three.message == ("nhc: check_hw_cpuinfo: Actual CPU socket count (1) does not match expected (2). "
                             "(and 2 more)")
    mount = judge.nhc_item(Section("nhc", (PUBLIC / "nhc-fail-check_fs_mount-stackhpc-913.txt").read_text(), 1))
    assert mount.message == "nhc: check_fs_mount: /lustre mounted from systemd-1"
    assert judge.nhc_item(Section("nhc", "nhc: command not found\n", 127)).status == "error"


# ---------------------------------------------------------------- the whole probe, as run on the device machine


@pytest.mark.parametrize("machine,model", [(H100, "H100"), (H200, "H200")])
def test_device_probe_output_passes_every_gpu_item(machine: Path, model: str) -> None:
    check = NodeCheck(name="gpu-health", nodes="vm", gpus=FULL.model_copy(update={"model": model}))
    sections = device_sections(machine)
    items = judge_node_check(check, "vm", sections, PROBES, ServiceManager(type="systemd"), [], SlurmView())
    assert [(i.name, i.status) for i in items] == [("gpus", "pass"), ("gpu xids", "pass")]
    timings = [int(line.split()[2]) for line in (machine / "timings.txt").read_text().splitlines()
               if line.startswith("probe")]
    assert len(timings) == 5 and max(timings) < 1000  # recorded: the GPU probe took under a second


def test_four_gpu_nvswitch_probe_passes_with_every_link_and_under_a_second() -> None:
    """The 4x H200 NVSwitch host: 4 GPUs, 18 active links of 26.562 GB/s each, fabric registration completed; the
    whole probe 219-221 ms. One link edited to inactive, or a speed floor above the real one, fails naming it."""
    expect = FULL.model_copy(update={"count": 4, "model": "H200", "nvlinks": 18, "nvlink_speed": 26.5})
    check = NodeCheck(name="gpu-health", nodes="vm", gpus=expect)
    sections = device_sections(H200X4)
    items = judge_node_check(check, "vm", sections, PROBES, ServiceManager(type="systemd"), [], SlurmView())
    assert [(i.name, i.status) for i in items] == [("gpus", "pass"), ("gpu xids", "pass"), ("gpu nvlink", "pass")]
    rows = sections["gpu"].output.strip().splitlines()[1:]
    assert len(rows) == 4 and all(r.endswith("Completed, Success") for r in rows)
    timings = [int(line.split()[2]) for line in (H200X4 / "timings.txt").read_text().splitlines()
               if line.startswith("probe")]
    assert len(timings) == 5 and max(timings) < 1000
    nvlink = sections["gpu.nvlink"]
    down = nvlink.output.replace("GPU 2: NVIDIA H200 (UUID: GPU-85bba01c-c208-c32d-0d5b-5ca00b34c6c0)\n\t Link 0: "
                                 "26.562 GB/s", "GPU 2: NVIDIA H200 (UUID: GPU-85bba01c-c208-c32d-0d5b-5ca00b34c6c0)"
                                 "\n\t Link 0: <inactive>", 1)
    assert down != nvlink.output
    edited = {**sections, "gpu.nvlink": Section("gpu.nvlink", down, nvlink.rc)}
    failed = judge_node_check(check, "vm", edited, PROBES, ServiceManager(type="systemd"), [], SlurmView())
    assert [(i.name, i.status, i.message) for i in failed][2] == (
        "gpu 2 nvlink", "fail", "gpu 2 nvlink 17 of 18 links up (1 inactive)")
    slower = NodeCheck(name="gpu-health", nodes="vm", gpus=expect.model_copy(update={"nvlink_speed": 50.0}))
    slow = judge_node_check(slower, "vm", sections, PROBES, ServiceManager(type="systemd"), [], SlurmView())
    slow_links = [i for i in slow if "nvlink" in i.name]
    assert len(slow_links) == 4 and all(i.status == "fail" and "26.562" in i.message for i in slow_links), slow


# ---------------------------------------------------------------- what is probed, and who owns a GPU drain


def test_dcgm_runs_on_schedule_only_when_asked_and_always_to_retest_a_drained_node() -> None:
    check = NodeCheck(name="gpu-health", nodes="gpu01", gpus=GpuExpectation(count=8), dcgm={"level": 2},
                      nhc=True, infiniband={"ports": 8, "rate": 400})
    routine, retest = Probes(), Probes()
    routine.add(check, [])
    retest.add(check, [], retest=True)
    assert routine.dcgm is None and retest.dcgm == (2, 900)
    scheduled = Probes()
    scheduled.add(check.model_copy(update={"dcgm": check.dcgm.model_copy(update={"on_schedule": True})}), [])
    assert scheduled.dcgm == (2, 900)
    command = probe_command_of(retest)
    assert "dcgmi diag -r 2" in command and "MARK_OFFLINE=0 DETACHED_MODE=0 TIMEOUT=300" in command
    assert "/sys/class/infiniband" in command and "NVRM: Xid" in command
    assert "dcgmi" not in probe_command_of(routine)


def probe_command_of(probes: Probes) -> str:
    from reconciler.checks.node import probe_command

    return probe_command(probes, ServiceManager(type="systemd"))


def test_gpu_drain_reason_and_ownership() -> None:
    from reconciler.checks.actions import Policy, drain_reason, owns, plan_actions
    from reconciler.checks.node import drained_by
    from reconciler.checks.results import CheckResult
    from reconciler.facts.models import SlurmNodeFact

    check = NodeCheck(name="gpu-health", nodes="gpu01", gpus=GpuExpectation(count=8))
    failing = CheckResult(check="gpu-health", kind="node", node="gpu01", ok=False,
                          message="gpu 3 xid 79 (fallen off the bus); gpus: found 7, expected 8")
    assert drain_reason(failing) == "reconciler: gpu 3 xid 79 (fallen off the bus)"
    assert owns("node", "gpu-health", "reconciler: gpu 3 xid 79 (fallen off the bus)", gpu=True)
    assert not owns("node", "storage", "reconciler: gpu 3 xid 79 (fallen off the bus)", gpu=False)
    assert drained_by(check, "reconciler: gpu 3 xid 79 (fallen off the bus)")
    assert not drained_by(check, "gpu 3 is noisy, ticket 7")
    view = SlurmView(nodes={
        "gpu01": SlurmNodeFact(name="gpu01", state="IDLE+DRAIN", reason="reconciler: gpu 3 xid 79 (fallen off the bus)")})
    passing = [CheckResult(check="gpu-health", kind="node", node=n, ok=True, message="8x H200") for n in ("gpu01",)]
    actions = plan_actions(passing, view, {("node", "gpu-health"): Policy(gpu=True)})
    assert [(a.node, a.kind) for a in actions] == [("gpu01", "resume")]
    # a check that does not probe GPUs never resumes a GPU drain
    other = [CheckResult(check="storage", kind="node", node="gpu01", ok=True, message="/shared writable")]
    assert plan_actions(other, view, {("node", "storage"): Policy()}) == []


def test_testbed_standins_embed_the_recorded_h200_byte_for_byte() -> None:
    """The STAND-IN nvidia-smi and dmesg replay the H200 recording: their embedded copies match the fixtures."""
    import ast

    def constant(path: Path, name: str) -> str:
        tree = ast.parse(path.read_text())
        [node] = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == name]
        return str(ast.literal_eval(node.value))

    marker, row = device_sections(H200)["gpu"].output.strip().splitlines()
    assert constant(STANDIN, "RECORDED_ROW") == row
    assert constant(STANDIN, "RECORDED_FIELDS") == ",".join(FIELDS[marker.split(": ")[1]])
    assert constant(STANDIN.with_name("dmesg"), "RECORDED") == (H200 / "dmesg-nvrm.txt").read_text()
