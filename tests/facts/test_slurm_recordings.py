"""Every parser of Slurm tool output, over real outputs of each release (tests/fixtures/slurm_tools/RELEASE,
recorded from testbeds by record.sh there): the fact parsers, the checks' partitions, and the drivers' shell
predicates on `scontrol show node -o` (run by sh here against a stand-in `scontrol` that replays the recording)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from checks.slurm_view import parse_partitions
from drivers.node_state import drain_steps, responding_command
from drivers.slurm_reboot import reboot_steps
from reconciler.facts.parsers import family_of, parse_scontrol_nodes, parse_slurm_version, parse_squeue
from tests.testbed_fixture import SLURM_RELEASES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_tools"

# What record.sh did in each scene: (state, reason) per node, the same on every release.
SCENES: dict[str, dict[str, tuple[str, str | None]]] = {
    "idle": {"gpu01": ("IDLE", None), "gpu02": ("IDLE", None)},
    "busy": {"gpu01": ("MIXED", None), "gpu02": ("IDLE+DRAIN", "reconciler: maintenance window")},
    "reboot": {"gpu01": ("MIXED+DRAIN+REBOOT_REQUESTED", "reconciler: upgrade abc123"),
               "gpu02": ("IDLE+DRAIN", "reconciler: maintenance window")},
    "down": {"gpu01": ("IDLE", None), "gpu02": ("DOWN+DRAIN", "switch port dead")},
}
CASES = [(release, scene) for release in SLURM_RELEASES for scene in SCENES]
IDS = [f"{release}-{scene}" for release, scene in CASES]

# A stand-in for scontrol (the recording replayed): `scontrol show node -o NODE` prints NODE's recorded line.
STAND_IN = """#!/bin/sh
[ "$1 $2 $3" = "show node -o" ] || { echo "stand-in scontrol: unexpected $*" >&2; exit 2; }
grep "^NodeName=$4 " "$RECORDED" || { echo "Node $4 not found" ; exit 1; }
"""


def recorded(release: str, name: str) -> str:
    """One recorded output."""
    return (FIXTURES / release / name).read_text()


def test_every_release_was_recorded() -> None:
    for release in SLURM_RELEASES:
        assert family_of(parse_slurm_version(recorded(release, "slurmctld_V.txt"))) == release


@pytest.mark.parametrize(("release", "scene"), CASES, ids=IDS)
def test_scontrol_show_node_states_and_reasons(release: str, scene: str) -> None:
    nodes = parse_scontrol_nodes(recorded(release, f"{scene}.scontrol_show_node_o.txt"))
    assert {name: (fact.state, fact.reason) for name, fact in nodes.items()} == SCENES[scene]
    for name, (state, _) in SCENES[scene].items():
        assert nodes[name].drained == ("DRAIN" in state)
        assert nodes[name].responding == (not state.startswith("DOWN"))
    assert parse_partitions(recorded(release, f"{scene}.scontrol_show_node_o.txt")) == {
        "gpu01": ["debug"], "gpu02": ["debug"]}


@pytest.mark.parametrize("release", SLURM_RELEASES)
def test_squeue_and_versions(release: str) -> None:
    jobs = parse_squeue(recorded(release, "busy.squeue.txt"))
    assert [(j.state, j.nodes, j.user, j.name) for j in jobs] == [("RUNNING", ["gpu01"], "root", "sentinel")]
    assert parse_squeue(recorded(release, "idle.squeue.txt")) == []
    for tool in ("slurmctld_V.txt", "slurmd_V.txt", "sinfo_V.txt"):
        assert family_of(parse_slurm_version(recorded(release, tool))) == release


@pytest.mark.parametrize(("release", "scene"), CASES, ids=IDS)
def test_driver_predicates_on_recorded_scontrol(release: str, scene: str, tmp_path: Path) -> None:
    """The drain, responding and reboot predicates the drivers run on the controller, against each recording."""
    (tmp_path / "scontrol").write_text(STAND_IN)
    (tmp_path / "scontrol").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "RECORDED": str(FIXTURES / release / f"{scene}.scontrol_show_node_o.txt")}

    def holds(command: str) -> bool:
        done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=30)
        assert "stand-in scontrol: unexpected" not in done.stderr, done.stderr
        return done.returncode == 0

    for node, (state, reason) in SCENES[scene].items():
        reboot = reboot_steps("ctl", node, "abc123")
        assert holds(drain_steps("ctl", node).drained) == ("DRAIN" in state), (node, state)
        assert holds(reboot.drained) == ("DRAIN" in state)
        # the `reboot` scene's drain is an ASAP reboot's (NextState=): Slurm lifts it itself, so never the upgrade's
        assert holds(reboot.ours) == (reason == "reconciler: upgrade abc123" and scene != "reboot"), (node, state)
        assert holds(reboot.pending) == ("REBOOT" in state)
        assert holds(responding_command(node)) == (not state.startswith("DOWN"))
    assert not holds(drain_steps("ctl", "gpu09").drained)  # a node Slurm does not know


@pytest.mark.parametrize("release", SLURM_RELEASES)
def test_long_form_and_sinfo_say_the_same(release: str) -> None:
    """`scontrol show node` (multi-line) and `sinfo -N -o '%N %t'` / `sinfo -R` agree with the one-line form."""
    for scene, want in SCENES.items():
        long_form = recorded(release, f"{scene}.scontrol_show_node.txt")
        joined = "\n".join(" ".join(block.split()) for block in long_form.split("\n\n") if block.strip())
        assert {n: (f.state, f.reason) for n, f in parse_scontrol_nodes(joined).items()} == want
        short = dict(line.split() for line in recorded(release, f"{scene}.sinfo_N_t.txt").splitlines())
        assert sorted(short) == sorted(want)
        assert [n for n, s in short.items() if s == "idle"] == [n for n, w in want.items() if w == ("IDLE", None)]
        reasons = recorded(release, f"{scene}.sinfo_R.txt").splitlines()[1:]
        assert sorted(line.split()[-1] for line in reasons) == sorted(n for n, (_, r) in want.items() if r)


def test_stand_in_replays_only_what_was_recorded() -> None:
    """The stand-in's own check: a command it does not replay fails loudly, not silently true."""
    env = {**os.environ, "RECORDED": os.devnull}
    done = subprocess.run(["sh", "-c", STAND_IN.split("\n", 1)[1], "scontrol", "ping"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and "unexpected" in done.stderr


@pytest.mark.parametrize("release", SLURM_RELEASES)
def test_a_pending_reboots_next_state_down_is_not_the_nodes_state(release: str, tmp_path: Path) -> None:
    """`scontrol reboot nextstate=DOWN` (scontrol(1)) shows `NextState=DOWN` beside the node's own State: the node
    still answers. The recorded reboot scene's line (NextState=RESUME/UNDRAIN) with DOWN written in its place."""
    line = next(x for x in recorded(release, "reboot.scontrol_show_node_o.txt").splitlines()
                if x.startswith("NodeName=gpu01 "))
    nxt = next(w for w in line.split() if w.startswith("NextState="))
    (tmp_path / "rec.txt").write_text(line.replace(nxt, "NextState=DOWN") + "\n")
    (tmp_path / "scontrol").write_text(STAND_IN)
    (tmp_path / "scontrol").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "RECORDED": str(tmp_path / "rec.txt")}
    done = subprocess.run(["sh", "-c", responding_command("gpu01")], env=env, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, (done.stdout, done.stderr)
