"""`motd:`, the kind that proves README's "Where a change goes": nothing but its listed files names it, and yet it
gets validate's checks (file:line, key path), file splitting, the registry, its phase and converged facts.
(On the testbed: tests/drivers/test_motd_testbed.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconciler.desired.loader import MERGEABLE_LISTS, DesiredStateError, load_dir
from reconciler.drivers import all_drivers
from reconciler.drivers.converged import converged_facts
from reconciler.drivers.phases import PHASES
from reconciler.engine.context import Context
from reconciler.engine.ops import WriteFile
from reconciler.engine.planner import make_plan
from tests.drivers.base_state import write_state

REPO = Path(__file__).resolve().parents[2]
MOTD = 'motd:\n  - {roles: [compute], content: "GPU nodes\\n"}\n  - {nodes: ctl, content: "controller\\n"}\n'


def readme_kind_files() -> list[str]:
    """The files README's numbered list says a new kind touches."""
    text = (REPO / "README.md").read_text()
    section = text.split("Where a change goes:", 1)[1].split("\n\n", 2)[1]
    return [m.group(1) for m in re.finditer(r"^\d+\. `([^`]+)`", section, re.M)]


def test_the_readme_list_is_every_file_of_the_code_that_names_the_kind() -> None:
    listed = {path.replace("<kind>", "motd") for path in readme_kind_files()}
    assert len(listed) == 4, listed
    naming = {str(path.relative_to(REPO)) for top in ("reconciler", "drivers", "checks")
              for path in (REPO / top).rglob("*.py") if not path.is_symlink() and "__pycache__" not in path.parts
              and "reconciler/drivers" not in str(path.relative_to(REPO)) and "reconciler/checks" not in
              str(path.relative_to(REPO)) and re.search(r"\bmotd\b|\bMotd", path.read_text(), re.I)}
    assert naming == listed


def test_the_registry_is_the_phase_table_in_its_order() -> None:
    names = [d.name for d in all_drivers()]
    assert names == ["nfs_exports", "mounts", "munge_key", "kernel_modules", "sysctls", "slurm_config",
                     "managed_files", "motd", "services", "packages", "slurm-upgrade", "patches", "enroot_images",
                     "node_state", "accounting"]
    rows = [name for name, row in PHASES.items() if row.driver]
    assert len(rows) == len(names) and all_drivers()[rows.index("motd")].phase == PHASES["motd"].number


def errors_of(root: Path) -> list[str]:
    with pytest.raises(DesiredStateError) as raised:
        load_dir(root)
    return [str(e) for e in raised.value.errors]


def test_a_selector_naming_nodes_not_in_the_inventory_is_refused_at_its_line(tmp_path: Path) -> None:
    root = write_state(tmp_path, 'motd:\n  - {roles: [compute], content: "x\\n"}\n'
                       "  - content: \"y\\n\"\n    nodes: cpu[01-03]\n")
    assert errors_of(root) == ["files.yaml:4:5: motd[1].nodes: unknown nodes: cpu[02-03]"]


def test_two_entries_or_files_writing_one_path_on_a_node_are_refused(tmp_path: Path) -> None:
    root = write_state(tmp_path, 'motd:\n  - {roles: [compute], content: "x\\n"}\n'
                       '  - {nodes: gpu02, path: /etc/motd, content: "y\\n"}\n'
                       '  - {nodes: ctl, path: /proc/motd, content: "z\\n"}\n'
                       'files:\n  - {path: /etc/motd, nodes: cpu01, content: "w\\n"}\n')
    assert errors_of(root) == [
        "files.yaml:3:20: motd[1].path: motd[1] and motd[0] both write /etc/motd on node gpu02",
        "files.yaml:4:18: motd[2].path: /proc/motd is under /proc, a kernel file system: not a file to manage (refused)",
        "files.yaml:6:6: files[0].path: /etc/motd is managed by motd[0]: not a place for files:"]


def test_a_bad_entry_is_a_schema_error_at_its_line(tmp_path: Path) -> None:
    root = write_state(tmp_path, 'motd:\n  - {roles: [gpu], content: "x\\n"}\n  - {nodes: ctl}\n')
    errors = errors_of(root)
    assert any(e.startswith("files.yaml:2:") and "motd[0].roles[0]" in e for e in errors), errors
    assert any(e.startswith("files.yaml:3:") and "motd[1].content: required key is missing" in e
               for e in errors), errors


def test_the_loaders_mergeable_lists_are_the_models_top_level_lists() -> None:
    assert MERGEABLE_LISTS == ("nodes", "images", "patches", "files", "services", "packages", "motd")


def test_motd_entries_may_be_split_over_files_and_plan_per_node(tmp_path: Path) -> None:
    root = write_state(tmp_path, MOTD)
    (root / "more.yaml").write_text('motd:\n  - {nodes: cpu01, path: /etc/motd.d/site, content: "cpu\\n"}\n')
    ctx = Context(loaded=load_dir(root), source="t")
    assert [(m.nodes, m.path) for m in ctx.state.motd] == [(None, "/etc/motd"), ("ctl", "/etc/motd"),
                                                              ("cpu01", "/etc/motd.d/site")]
    converged = converged_facts(ctx, all_drivers())
    ctx.facts = converged
    assert not make_plan(ctx, all_drivers()).has_changes
    ctx.facts = converged_facts(ctx, ())  # no driver asked: the files are missing
    plan = make_plan(ctx, all_drivers())
    assert sorted((c.node, c.resource, c.action, c.phase) for c in plan.changes if c.action != "ok") == [
        ("cpu01", "/etc/motd.d/site", "create", 30), ("ctl", "/etc/motd", "create", 30),
        ("gpu01", "/etc/motd", "create", 30), ("gpu02", "/etc/motd", "create", 30)]
    write = next(c for c in plan.changes if c.node == "ctl" and c.driver == "motd").ops[0]
    assert isinstance(write, WriteFile) and write.content == "controller\n"  # exactly: no header users would see
