"""Every GPU's history (checks/fleet) from what the testbed's stand-in nvidia-smi and dmesg print: the recorded
H200's values with planted faults (deploy/testbed/standins), run here as the node check's probe would run them.
Real SQLite; the NCCL bandwidths are the check results an NCCL check stores."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner

from reconciler.checks import store as check_store
from reconciler.checks.fleet import store as fleet
from reconciler.checks.fleet.bandwidth import slides
from reconciler.checks.fleet.rank import standings
from reconciler.checks.fleet.readings import REMAP_FAILURE, readings_from
from reconciler.checks.gpu.query import ECC_FIELDS, FIELDS
from reconciler.checks.gpu.xid import XidMemory
from reconciler.checks.node import remembered
from reconciler.checks.results import CheckResult
from reconciler.cli.main import main
from reconciler.daemon.status_page import load_snapshot, render
from reconciler.daemon.store import Store
from reconciler.facts.sections import Section
from reconciler.model.fleet import FleetRules

REPO = Path(__file__).resolve().parents[2]
STANDINS = REPO / "deploy" / "testbed" / "standins"
DAY = 86_400.0
T0 = float(int(time.time() // 3600 * 3600) - 10 * 3600)  # recent: the CLI and the page judge by the clock


def probe(tmp: Path, host: str, faults: str, boot: str = "b0000000-0000-4000-8000-000000000001") -> dict[str, Section]:
    """The node check's GPU sections as the stand-ins answer on HOST with FAULTS planted."""
    planted = tmp / f"faults-{host}"
    if not planted.exists() or planted.read_text() != faults:  # its time stamps the stand-in's XID lines
        planted.write_text(faults)
    env = {**os.environ, "RECONCILER_STANDIN_GPU_FAULTS": str(planted), "RECONCILER_STANDIN_HOST": host,
           "RECONCILER_STANDIN_DRIVER": str(tmp / "no-driver")}

    def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(STANDINS / script), *args], capture_output=True, text=True,
                              env=env, timeout=30)

    query = run("nvidia-smi", f"--query-gpu={','.join(FIELDS['new'])}", "--format=csv,noheader,nounits")
    corrected = run("nvidia-smi", f"--query-gpu={','.join(ECC_FIELDS)}", "--format=csv,noheader,nounits")
    pcie = run("nvidia-smi", "-q")
    links = run("nvidia-smi", "nvlink", "-s")
    kernel = run("dmesg")
    xids = "".join(line + "\n" for line in kernel.stdout.splitlines() if "NVRM: Xid" in line)
    return {"gpu": Section("gpu", "# fields: new\n" + query.stdout + query.stderr, query.returncode),
            "gpu.ecc": Section("gpu.ecc", corrected.stdout + corrected.stderr, corrected.returncode),
            "gpu.pcie": Section("gpu.pcie", pcie.stdout, pcie.returncode),
            "gpu.nvlink": Section("gpu.nvlink", links.stdout, 0),
            "gpu.xid": Section("gpu.xid", f"boot {boot}\n" + xids, 0)}


class Fleet:
    """A daemon's store fed node by node, each node's XID memory carried between its checks."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.store = tmp, Store(tmp / "state.db")  # the daemon's own store
        self.conn = self.store.conn
        fleet.ensure_schema(self.conn)
        check_store.ensure_schema(self.conn)
        self.memory: dict[str, XidMemory] = {}

    def check(self, host: str, faults: str, at: float, boot: str = "b0000000-0000-4000-8000-000000000001") -> None:
        sections = probe(self.tmp, host, faults, boot)
        readings, xids = readings_from(host, sections, at, self.memory.get(host))
        fleet.record(self.conn, readings, xids)
        self.memory[host] = remembered(sections, self.memory.get(host, XidMemory()))

    def nccl(self, host: str, busbw: float, at: float) -> None:
        check_store.record(self.conn, CheckResult(
            check="nccl-local", kind="nccl", node=host, ok=True, message=f"busbw {busbw}", value=busbw,
            started=datetime.fromtimestamp(at, UTC), duration=30.0))


def uuid_of(tmp: Path, host: str, index: int) -> str:
    """The UUID the stand-in gives GPU INDEX of HOST (no fault planted)."""
    sections = probe(tmp, host, "")
    row = sections["gpu"].output.splitlines()[1 + index]
    return row.split(",")[4].strip()


def test_three_rma_candidates_each_by_its_rule_and_a_sliding_node_ranked(tmp_path: Path) -> None:
    world = Fleet(tmp_path)
    for hour in range(6):  # a healthy start: every GPU of both nodes known
        world.check("gpu01", "", T0 + hour * 3600)
        world.check("gpu02", "", T0 + hour * 3600)
    faults = "xid79 1\nremap-failure 2\necc 3 4\n"
    world.check("gpu01", faults, T0 + 7 * 3600)
    world.check("gpu01", faults, T0 + 8 * 3600)  # the same XID line again: not counted twice
    for run, busbw in enumerate([480.1, 479.5, 478.8, 450.2, 420.0, 401.3, 395.0, 380.9, 377.7]):
        world.nccl("gpu02", busbw, T0 + run * 3600)
        world.nccl("gpu01", 480.0 + run % 2, T0 + run * 3600)
    ranked = standings(world.conn, T0 + 9 * 3600, FleetRules())
    assert len(ranked) == 16
    top = {(s.node, s.index): s for s in ranked[:3]}
    assert set(top) == {("gpu01", 1), ("gpu01", 2), ("gpu01", 3)}
    assert [h.rule for h in top[("gpu01", 1)].rma] == ["xid-hardware"]
    assert "1 XID(s) 79 (fallen off the bus)" in top[("gpu01", 1)].rma[0].detail
    assert top[("gpu01", 1)].rma[0].since == T0 + 7 * 3600
    assert [h.rule for h in top[("gpu01", 2)].rma] == ["row-remap-failure"]
    assert [h.rule for h in top[("gpu01", 3)].rma] == ["uncorrectable-ecc"]
    assert "4 uncorrectable ECC error(s) over its life" in top[("gpu01", 3)].rma[0].detail
    assert sum(1 for s in ranked if s.rma) == 3
    sliding = [s for s in ranked if s.node == "gpu02"]
    assert all("node gpu02: nccl-local bus bandwidth" in s.why[-1] and s.score > 0 and not s.rma for s in sliding)
    assert ranked[3].node == "gpu02"  # the sliding node's GPUs come next, above the healthy ones
    assert all(s.score == 0 and not s.why for s in ranked if s.node == "gpu01" and s.index > 3)
    [slide] = slides(world.conn, 10.0)
    assert slide.node == "gpu02" and 19 < slide.drop < 21 and slide.runs == 9

    out = CliRunner().invoke(main, ["gpus", "--state-dir", str(tmp_path), "--rma"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert len(lines) == 4 and all(" gpu01 " in line for line in lines[1:]), lines
    assert {r for r in ("xid-hardware", "row-remap-failure", "uncorrectable-ecc") for line in lines[1:]
            if f"RMA {r} since" in line} == {"xid-hardware", "row-remap-failure", "uncorrectable-ecc"}
    gone = uuid_of(tmp_path, "gpu01", 1)
    vague = CliRunner().invoke(main, ["gpus", gone[:16], "--state-dir", str(tmp_path)])
    assert vague.exit_code == 1 and "matches 16 GPUs" in vague.output, vague.output
    one = CliRunner().invoke(main, ["gpus", gone, "--state-dir", str(tmp_path)])
    assert one.exit_code == 0 and f"GPU {gone}" in one.output and "XID 79 x1" in one.output, one.output
    assert "RMA candidate: xid-hardware" in one.output

    page = render(load_snapshot(tmp_path / "state.db"))
    section = page[page.index('<section id="gpu-fleet">'):]
    section = section[:section.index("</section>")]
    assert "16 GPUs on 2 nodes" in section and '<span class="bad" id="rma-count">3 RMA candidate(s)</span>' in section
    assert section.count('class="gpu rma"') == 3 and section.count('class="gpu warn"') == 8
    assert 'data-code="79"' in section and 'class="worst rma"' in section
    assert 'data-node="gpu02"' in section and "node gpu02: nccl-local bus bandwidth" in section
    world.conn.close()


def test_a_gpu_moved_to_another_node_keeps_its_history(tmp_path: Path) -> None:
    world = Fleet(tmp_path)
    moved = uuid_of(tmp_path, "gpu01", 0)
    world.check("gpu01", "ecc 0 2\n", T0)
    world.check("gpu01", "ecc 0 2\n", T0 + 3600)
    (tmp_path / "no-driver").mkdir()
    (tmp_path / "no-driver" / "VERSION").write_text("570.86.15\n")  # gpu02 runs an older driver stand-in
    world.check("gpu02", f"uuid 5 {moved} 9999000000005\necc 5 2\n", T0 + 2 * DAY)  # swapped into gpu02's slot 5
    history = fleet.history(world.conn, moved)
    assert history is not None and (history.node, history.index) == ("gpu02", 5)
    assert [(p.node, p.index) for p in history.places] == [("gpu01", 0), ("gpu02", 5)]
    assert [r["at"] for r in history.readings] == [T0, T0 + 3600, T0 + 2 * DAY]
    assert history.drivers == [(T0, "580.159.04"), (T0 + 2 * DAY, "570.86.15")]  # each driver it ran, since when
    [standing] = [s for s in standings(world.conn, T0 + 2 * DAY, FleetRules()) if s.uuid == moved]
    assert standing.node == "gpu02" and [h.rule for h in standing.rma] == ["uncorrectable-ecc"]
    assert standing.rma[0].since == T0  # since it first met the rule, on its old node
    world.conn.close()


def test_a_remap_still_pending_after_a_reset_and_the_retention(tmp_path: Path) -> None:
    world = Fleet(tmp_path)
    world.check("gpu01", "remap 4\nsbe 5 2000\npcie-replays 7 540\n", T0, boot="b0000000-0000-4000-8000-00000000000a")
    ranked = standings(world.conn, T0, FleetRules())
    [noted] = [s for s in ranked if s.index == 5]
    assert noted.why == ["2000 corrected ECC error(s) (lifetime)"] and not noted.rma
    [marginal] = [s for s in ranked if s.index == 7]
    assert marginal.why == ["540 PCIe replays since the last reset"] and not marginal.rma
    quiet = fleet.history(world.conn, ranked[-1].uuid)
    assert quiet is not None and quiet.readings[-1]["pcie_replays"] == 2  # the recorded H200's own count
    assert not [s for s in standings(world.conn, T0, FleetRules()) if s.rma]  # pending: a reset applies it
    world.check("gpu01", "remap 4\n", T0 + 3600, boot="b0000000-0000-4000-8000-00000000000b")
    [hit] = [s for s in standings(world.conn, T0 + 3600, FleetRules()) if s.rma]
    assert (hit.index, hit.rma[0].rule, hit.rma[0].since) == (4, "pending-after-reset", T0 + 3600)
    off = FleetRules.model_validate({"rma": {"pending_after_reset": False}})
    assert not [s for s in standings(world.conn, T0 + 3600, off) if s.rma]
    world.check("gpu01", "remap-failure 6\n", T0 + 40 * DAY)
    assert fleet.prune(world.conn, T0 + 40 * DAY, 30 * DAY) == 16  # both early checks' readings of 8 GPUs
    assert fleet.prune(world.conn, T0 + 40 * DAY + 60, 30 * DAY) == 0  # at most once a day
    history = fleet.history(world.conn, uuid_of(tmp_path, "gpu01", 6))
    assert history is not None and len(history.readings) == 1 and history.readings[0]["flags"] & REMAP_FAILURE
    assert len(history.places) == 1  # where it was is kept past the retention
    world.conn.close()


def test_rules_are_checked_and_kept_for_the_cli(tmp_path: Path) -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="named twice"):
        FleetRules.model_validate({"rma": {"xids": [{"name": "a", "codes": [79]}, {"name": "a", "codes": [48]}]}})
    with pytest.raises(ValidationError, match="from 1 to 1000"):
        FleetRules.model_validate({"rma": {"xids": [{"name": "a", "codes": [0]}]}})
    with pytest.raises(ValidationError, match="at least 1d"):
        FleetRules.model_validate({"retention": "2h"})
    conn = sqlite3.connect(tmp_path / "state.db")
    fleet.ensure_schema(conn)
    assert fleet.load_rules(conn) == FleetRules()
    mine = FleetRules.model_validate({"retention": "90d", "rma": {"uncorrectable_ecc": 0}})
    fleet.save_rules(conn, mine)
    assert fleet.load_rules(conn) == mine
    conn.close()


def test_a_real_h200s_readings_join_the_history_like_any_nodes(tmp_path: Path) -> None:
    """The device recording (tests/fixtures/gpu/h200-fleet-2026-11-29: four probe runs on a real H200) imported
    beside two stand-in nodes: its GPU is in the fleet with its real UUID, serial and four readings."""
    from bench.gpu_fleet_device import import_probes

    recorded = REPO / "tests" / "fixtures" / "gpu" / "h200-fleet-2026-11-29"
    world = Fleet(tmp_path)
    world.check("gpu01", "ecc 3 2\n", T0)
    assert import_probes(world.conn, (recorded / "probes.txt").read_text(), "h200-device") == 4
    ranked = standings(world.conn, T0, FleetRules())
    [real] = [s for s in ranked if s.node == "h200-device"]
    assert real.uuid == "GPU-1c0e6660-2c3a-435c-cfa7-1f630c135749" and real.serial == "1653924042426"
    assert real.score == 0 and not real.rma and ranked[0].node == "gpu01"
    history = fleet.history(world.conn, real.uuid)
    assert history is not None and [r["temperature"] for r in history.readings] == [37, 37, 37, 37]  # real values
    assert [(r["sbe_volatile"], r["sbe_aggregate"], r["pcie_replays"]) for r in history.readings] == [(0, 0, 0)] * 4
    assert "GPU-1c0e6660-2c3a-435c-cfa7-1f630c135749" in (recorded / "gpus.txt").read_text()
    world.conn.close()


def test_an_rma_rule_on_an_ignored_xid_is_refused_at_its_line(tmp_path: Path) -> None:
    import shutil

    import pytest

    from reconciler.desired.loader import DesiredStateError, load_dir

    state = tmp_path / "state"
    shutil.copytree(REPO / "desired-state", state, ignore=shutil.ignore_patterns("examples", "README.md"))
    checks = (state / "checks.yaml").read_text()
    assert "      gpus:\n        count: 8\n        model: H200\n" in checks
    checks = checks.replace("      gpus:\n        count: 8\n        model: H200\n",
                            "      gpus:\n        count: 8\n        model: H200\n        xid_ignore: [13, 79]\n", 1)
    (state / "checks.yaml").write_text(checks + "  fleet:\n    rma:\n      xids:\n"
                                       "        - {name: fell-off, codes: [48, 79]}\n")
    with pytest.raises(DesiredStateError) as caught:
        load_dir(state)
    lines = checks.count("\n") + 1
    [error] = [str(e) for e in caught.value.errors]
    assert error.startswith(f"checks.yaml:{lines + 3}:40: checks.fleet.rma.xids[0].codes[1]: XID 79 is in the "
                            "xid_ignore of node check 'dgx-gpu-health'"), error


def test_pcie_replays_of_real_h200s() -> None:
    from reconciler.checks.gpu.pcie import parse_replays

    gpu = REPO / "tests" / "fixtures" / "gpu"
    assert parse_replays((gpu / "h200-x1-2026-11-25" / "smi-q.txt").read_text()) == {"0000:00:06": 2}
    assert parse_replays((gpu / "h200-x4-2026-11-26" / "smi-q.txt").read_text()) == {
        "0000:00:06": 1, "0000:00:07": 0, "0000:00:08": 0, "0000:00:09": 0}
    rolled = "GPU 00000000:3B:00.0\n        Replays Since Reset : 5\n        Replay Number Rollovers : 1\n"
    assert parse_replays(rolled) == {"0000:3b:00": 5 + (1 << 32)}
