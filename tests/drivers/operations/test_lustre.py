"""Lustre mounts (issue 14, item 6): the fstab line, refused sources and options with file:line, the plan."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.mountpoints import make_command
from reconciler.engine.context import Context
from reconciler.engine.ops import RunCommand
from reconciler.engine.planner import make_plan
from reconciler.facts.models import MountFact
from reconciler.render import render_file
from tests.drivers.operations.test_operations import EXAMPLE, converged_facts

LUSTRE = """\
    - source: 10.0.0.5@tcp:/lustrefs
      mountpoint: /mnt/lustre
      type: lustre
      options: [defaults, _netdev, flock]
      nodes: dgx[01-04]
"""


def _with_lustre(tmp_path: Path, entry: str = LUSTRE) -> Path:
    target = tmp_path / "desired-state"
    shutil.copytree(EXAMPLE, target)
    storage = target / "storage.yaml"
    storage.write_text(storage.read_text() + entry)
    return target


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_fstab_line_as_lustre_docs_show_it(tmp_path: Path) -> None:
    state = load_dir(_with_lustre(tmp_path)).state
    fstab = render_file(state, "dgx01", "fstab", "t").splitlines()
    assert "10.0.0.5@tcp:/lustrefs /mnt/lustre lustre defaults,_netdev,flock 0 0" in fstab
    assert "lustre" not in render_file(state, "login01", "fstab", "t")


def test_several_mgs_and_failover_nids_are_accepted(tmp_path: Path) -> None:
    entry = LUSTRE.replace("10.0.0.5@tcp:/lustrefs", "10.1.1.1@o2ib,10.0.0.5@tcp1:10.1.1.2@o2ib:/scratch/team")
    state = load_dir(_with_lustre(tmp_path, entry)).state
    assert "10.1.1.1@o2ib,10.0.0.5@tcp1:10.1.1.2@o2ib:/scratch/team /mnt/lustre lustre" in render_file(
        state, "dgx02", "fstab", "t")


@pytest.mark.parametrize(("old", "new", "key", "message"), [
    ("10.0.0.5@tcp:/lustrefs", "10.0.0.5:/lustrefs", "source", "not an LNet NID"),
    ("10.0.0.5@tcp:/lustrefs", "10.0.0.5@udp:/lustrefs", "source", "not an LNet NID"),
    ("10.0.0.5@tcp:/lustrefs", "mgs01@tcp:/lustrefs", "source", "IPv4 address"),
    ("10.0.0.5@tcp:/lustrefs", "10.0.0.5@tcp::/lustrefs", "source", "empty MGS NID"),
    ("10.0.0.5@tcp:/lustrefs", "10.0.0.5@tcp:/lustrefs9x", "source", "file system name"),
    ("10.0.0.5@tcp:/lustrefs", "10.0.0.5@tcp/lustrefs", "source", "not a Lustre source"),
    ("[defaults, _netdev, flock]", "[defaults, flock]", "options", "needs the _netdev option"),
    ("[defaults, _netdev, flock]", "[defaults, _netdev, flock, localflock]", "options", "exclude each other"),
    ("[defaults, _netdev, flock]", "[defaults, _netdev, flok]", "options", "did you mean flock"),
    ("[defaults, _netdev, flock]", "[defaults, _netdev, user_xatr]", "options", "did you mean user_xattr"),
    ("[defaults, _netdev, flock]", "[_netdev, ro, rw]", "options", "exclude each other"),
    ("[defaults, _netdev, flock]", "[_netdev, retry=soon]", "options", "bad value"),
    ("[defaults, _netdev, flock]", "[_netdev, _netdev]", "options", "given twice"),
])
def test_bad_lustre_source_or_options_refused_with_file_line(tmp_path: Path, old: str, new: str, key: str,
                                                             message: str) -> None:
    directory = _with_lustre(tmp_path, LUSTRE.replace(old, new))
    with pytest.raises(DesiredStateError) as info:
        load_dir(directory)
    [error] = info.value.errors
    assert error.key_path() == f"storage.mounts[2].{key}", str(error)
    assert message in str(error), str(error)
    assert error.location is not None
    assert (error.location.file, error.location.line) == ("storage.yaml", _line_of(directory / "storage.yaml", new))


def test_lustre_without_options_is_refused_for_missing_netdev(tmp_path: Path) -> None:
    directory = _with_lustre(tmp_path, LUSTRE.replace("      options: [defaults, _netdev, flock]\n", ""))
    with pytest.raises(DesiredStateError) as info:
        load_dir(directory)
    [error] = info.value.errors
    assert "_netdev" in str(error) and error.location is not None and error.location.file == "storage.yaml"


def test_nfs_options_keep_their_old_freedom(tmp_path: Path) -> None:
    """Only lustre mounts get the option list: an nfs mount with an option we do not know still loads."""
    entry = LUSTRE.replace("10.0.0.5@tcp:/lustrefs", "nfs01:/export/home").replace("type: lustre", "type: nfs")
    load_dir(_with_lustre(tmp_path, entry.replace("flock", "vers=4.2").replace("/mnt/lustre", "/mnt/h")))


def test_missing_lustre_mount_planned_and_tcp0_reads_back_as_tcp(tmp_path: Path) -> None:
    entry = LUSTRE.replace("10.0.0.5@tcp:", "10.0.0.5@tcp0:")
    ctx = Context(loaded=load_dir(_with_lustre(tmp_path, entry)), source="t")
    ctx.facts = converged_facts(ctx)
    for name in ("dgx01", "dgx02", "dgx03", "dgx04"):  # what the kernel shows: @tcp, fstype lustre
        ctx.facts.nodes[name].mounts = [m for m in ctx.facts.nodes[name].mounts if m.mountpoint != "/mnt/lustre"]
        if name != "dgx03":
            ctx.facts.nodes[name].mounts.append(MountFact(source="10.0.0.5@tcp:/lustrefs", mountpoint="/mnt/lustre",
                                                          fstype="lustre", options=["rw", "flock"]))
    changes = make_plan(ctx, all_drivers()).changing()
    assert [(c.node, c.resource) for c in changes] == [("dgx03", "mount /mnt/lustre")]
    assert changes[0].ops == [RunCommand(command=f"{make_command('/mnt/lustre')} && mount /mnt/lustre",
                                         description="mount 10.0.0.5@tcp0:/lustrefs on /mnt/lustre")]
