"""Mount points the mounts driver creates: recorded on the node, removed on undo only when empty and ours.

The shell commands and the fact snippet run for real (sh, coreutils, the local file system) on directories under
a temporary directory, with the record file there instead of /var/lib/reconciler.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from reconciler.desired.loader import load_dir
from reconciler.drivers import mountpoints
from reconciler.drivers.mounts import FSTAB, MountsDriver
from reconciler.engine.context import Context
from reconciler.engine.ops import RunCommand
from reconciler.facts.models import FileFact, MountFact
from tests.drivers.operations.test_operations import converged_facts

REPO = Path(__file__).resolve().parents[2]


def sh(command: str) -> subprocess.CompletedProcess[str]:
    """Run COMMAND with /bin/sh, as the node's shell would."""
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=60)


def statuses(record: Path) -> dict[str, str]:
    """What the fact snippet reports for RECORD, run the way the fact script runs it (exec, sets `stdout`)."""
    scope: dict[str, object] = {}
    exec(compile(mountpoints.fact_snippet(str(record)), "<mountpoints>", "exec"), scope)  # noqa: S102
    return mountpoints.parse_answer({"rc": 0, "stdout": scope["stdout"]})


def test_a_created_mount_point_is_recorded_and_an_existing_one_is_not(tmp_path: Path) -> None:
    record = tmp_path / "state" / "created"
    new, old = tmp_path / "new" / "deep", tmp_path / "old"
    old.mkdir()
    for path in (new, old, new):  # the second make of NEW finds it: recorded once
        assert sh(mountpoints.make_command(str(path), str(record))).returncode == 0
    assert new.is_dir() and old.is_dir()
    assert record.read_text().splitlines() == [str(new)]
    assert statuses(record) == {str(new): "empty"}


def test_remove_takes_an_empty_directory_of_ours_keeps_a_full_one_and_forgets_both(tmp_path: Path) -> None:
    record = tmp_path / "created"
    empty, full, gone = tmp_path / "empty", tmp_path / "full", tmp_path / "gone"
    for path in (empty, full, gone):
        assert sh(mountpoints.make_command(str(path), str(record))).returncode == 0
    (full / "results.csv").write_text("someone's data\n")
    gone.rmdir()
    assert statuses(record) == {str(empty): "empty", str(full): "full", str(gone): "absent"}
    for path in (empty, full, gone):
        done = sh(mountpoints.remove_command(str(path), str(record)))
        assert done.returncode == 0, done.stderr
    assert not empty.exists()
    assert (full / "results.csv").read_text() == "someone's data\n"
    assert record.read_text() == "" and statuses(record) == {}
    again = sh(mountpoints.remove_command(str(empty), str(record)))  # twice: nothing left to do, no error
    assert again.returncode == 0 and record.read_text() == ""


def test_a_symlink_in_place_of_the_directory_is_neither_listed_nor_removed(tmp_path: Path) -> None:
    record, target = tmp_path / "created", tmp_path / "real"
    link = tmp_path / "mp"
    assert sh(mountpoints.make_command(str(link), str(record))).returncode == 0
    link.rmdir()
    target.mkdir()
    link.symlink_to(target)
    assert statuses(record) == {str(link): "absent"}
    assert sh(mountpoints.remove_command(str(link), str(record))).returncode == 0
    assert link.is_symlink() and target.is_dir()


def test_the_snippet_reads_mountinfo_escapes_as_the_kernel_writes_them(tmp_path: Path) -> None:
    """/proc/self/mountinfo writes space, tab, newline and backslash as \\ooo; the snippet (no `re` on the node)
    decodes exactly those, and leaves a backslash that starts no octal escape as it is."""
    scope: dict[str, object] = {}
    exec(compile(mountpoints.fact_snippet(str(tmp_path / "none")), "<mountpoints>", "exec"), scope)  # noqa: S102
    unescape = scope["unescape"]
    assert callable(unescape)
    assert unescape("/mnt/a\\040b\\011c\\012d\\134e") == "/mnt/a b\tc\nd\\e"
    assert unescape("/plain") == "/plain" and unescape("/x\\09y\\") == "/x\\09y\\"


def test_a_node_answer_is_bounded_to_clean_paths_and_known_statuses() -> None:
    answer = {"rc": 0, "stdout": json.dumps({"/data": "empty", "/etc": "empty", "rel": "empty", "/a/../b": "empty",
                                             "/x": "gone", "/kept": "full"})}
    assert mountpoints.parse_answer(answer) == {"/data": "empty", "/kept": "full"}
    assert mountpoints.parse_answer({"rc": 1, "stdout": "", "stderr": "boom"}) == {}
    assert mountpoints.parse_answer({"rc": 0, "stdout": "[1, 2]"}) == {}
    assert mountpoints.parse_answer(["not", "a", "dict"]) == {}
    assert mountpoints.parse_answer({"rc": 0, "stdout": 7}) == {}


def _ctx(created: dict[str, str]) -> Context:
    ctx = Context(loaded=load_dir(REPO / "desired-state"), source="test")
    ctx.facts = converged_facts(ctx)
    ctx.facts.keep("dgx01", mountpoints.CreatedMountpoints(created))
    return ctx


def test_plan_removes_only_an_empty_unwanted_mount_point_of_ours() -> None:
    ctx = _ctx({"/data": "empty", "/kept": "full", "/gone": "absent", "/home": "empty", "/busy": "mounted"})
    changes = [c for c in MountsDriver().plan(ctx, "dgx01", ctx.facts.nodes["dgx01"]) if c.changing]
    assert [(c.resource, c.action) for c in changes] == [("mount point /data", "delete")], changes
    (op,) = changes[0].ops
    assert isinstance(op, RunCommand) and "rmdir --ignore-fail-on-non-empty -- /data" in op.command
    other = MountsDriver().plan(ctx, "dgx02", ctx.facts.nodes["dgx02"])  # nothing recorded there
    assert not [c for c in other if c.changing]


def test_unmounting_a_mount_of_ours_removes_its_directory_in_the_same_change() -> None:
    ctx = _ctx({"/old": "mounted"})
    facts = ctx.facts.nodes["dgx01"]
    fstab = facts.files[FSTAB].content or ""
    line = "nfs01:/export/old /old nfs defaults 0 0\n"
    facts.files[FSTAB] = FileFact(**{**facts.files[FSTAB].model_dump(),
                                     "content": fstab.replace("# END", line + "# END", 1)})
    facts.mounts.append(MountFact(source="nfs01:/export/old", mountpoint="/old", fstype="nfs", options=[]))
    changes = {c.resource: c for c in MountsDriver().plan(ctx, "dgx01", facts) if c.changing}
    unmount = changes["mount /old"]
    assert [op.description for op in unmount.ops if isinstance(op, RunCommand)] == \
        ["umount /old", "remove the empty mount point /old"]
    assert "mount point /old" not in changes  # one change, not a second one for the same directory


def test_the_mount_command_names_the_mount_and_records_a_directory_it_makes() -> None:
    ctx = _ctx({})
    facts = ctx.facts.nodes["dgx01"]
    facts.mounts = [m for m in facts.mounts if m.mountpoint != "/home"]
    (change,) = [c for c in MountsDriver().plan(ctx, "dgx01", facts) if c.resource == "mount /home"]
    (op,) = change.ops
    assert isinstance(op, RunCommand)
    assert op.description == "mount nfs01:/export/home on /home"
    assert mountpoints.RECORD in op.command and op.command.endswith("&& mount /home")


def test_the_before_image_restore_of_a_failed_mount_removes_only_the_directory_the_apply_made(tmp_path: Path) -> None:
    """No earlier commit (one-shot apply): restoring a mount that never came up removes the empty mount point the
    apply created; a directory that existed before, or that now holds something, stays; the restore's check then
    says 'already as before', so a second restore does nothing."""
    from reconciler.drivers.mounts import _unmount_restore

    record = tmp_path / "created"
    made, full, before = tmp_path / "made", tmp_path / "full", tmp_path / "before"
    before.mkdir()
    for path in (made, full, before):  # the apply's mount step: `make_command && mount` (the mount failed)
        assert sh(mountpoints.make_command(str(path), str(record))).returncode == 0
    (full / "notes").write_text("kept\n")
    for path, created_now in ((made, True), (full, True), (before, False)):
        restore = _unmount_restore(str(path), created_now=created_now, record=str(record))
        assert restore.check is not None
        if not created_now:
            assert sh(restore.check).returncode == 0  # not mounted, not ours: nothing to restore
            continue
        assert sh(restore.check).returncode != 0  # still recorded: the restore has work to do
        for op in restore.ops:
            assert isinstance(op, RunCommand)
            result = sh(op.command)
            assert result.returncode == 0, result.stderr
        assert sh(restore.check).returncode == 0  # as before now: a second restore is a no-op
    assert not made.exists() and (full / "notes").read_text() == "kept\n" and before.is_dir()
    assert record.read_text().split() == []
