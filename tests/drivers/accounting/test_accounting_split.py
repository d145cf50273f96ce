"""Accounting at scale (issue 32): `accounting:` split over files, names unique over all of them, root causes
shown before the errors they cause, the size limit's knob named, and the bench's figures sane at small N.

Real loader, real files (the example desired state copied); no Slurm needed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.accounting_scale import main as bench_main
from reconciler.cli.main import main as cli
from reconciler.desired.errorder import SHOWN_ALIKE
from reconciler.desired.loader import ConfigError, DesiredStateError, LoadLimits, load_dir

REPO = Path(__file__).resolve().parents[3]

TREE = """\
accounting:
  prune: false
  qos:
    - {name: high, priority: 100}
  accounts:
    - {name: ml, fairshare: 10, qos: [normal, high]}
    - {name: ml-vision, parent: ml}
"""


BROKEN_TREE = TREE.replace("parent: ml}", "parent: ml")  # an unterminated flow mapping: the file does not load


def _users(names: list[str], account: str = "ml") -> str:
    return "accounting:\n  users:\n" + "".join(f"    - {{name: {n}, default_account: {account}}}\n" for n in names)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A copy of the example desired state, with an `accounting/` folder to fill."""
    target = tmp_path / "desired-state"
    shutil.copytree(REPO / "desired-state", target)
    (target / "accounting").mkdir()
    return target


def _errors(directory: Path, limits: LoadLimits | None = None) -> list[ConfigError]:
    with pytest.raises(DesiredStateError) as info:
        load_dir(directory, limits=limits)
    return info.value.errors


def test_accounting_split_over_files_merges_its_lists_with_each_place_kept(state: Path) -> None:
    """Tree in one file, users in two: every list item is loaded, each with its own file:line."""
    (state / "accounting" / "tree.yaml").write_text(TREE)
    (state / "accounting" / "users-a.yaml").write_text(_users(["alice", "bob"]))
    (state / "accounting" / "users-b.yaml").write_text(_users(["carol"], "ml-vision")
                                                       + "  qos:\n    - {name: low, priority: 1}\n")
    loaded = load_dir(state)
    acct = loaded.state.accounting
    assert acct is not None
    assert [u.name for u in acct.users] == ["alice", "bob", "carol"]
    assert [q.name for q in acct.qos] == ["high", "low"]
    assert [a.name for a in acct.accounts] == ["ml", "ml-vision"]
    where = {name: loaded.where(("accounting", "users", i, "name")) for i, name in enumerate(["alice", "bob", "carol"])}
    assert [(w.file, w.line) for w in where.values() if w] == [
        ("accounting/users-a.yaml", 3), ("accounting/users-a.yaml", 4), ("accounting/users-b.yaml", 3)]
    low = loaded.where(("accounting", "qos", 1))
    assert low is not None and (low.file, low.line) == ("accounting/users-b.yaml", 5)


def test_a_name_defined_in_two_files_is_refused_at_the_second_with_the_first_named(state: Path) -> None:
    (state / "accounting" / "tree.yaml").write_text(TREE)
    (state / "accounting" / "users-a.yaml").write_text(_users(["alice", "bob"]))
    (state / "accounting" / "users-b.yaml").write_text(_users(["dave", "alice"]))
    errors = _errors(state)
    assert [str(e) for e in errors] == [
        "accounting/users-b.yaml:4:8: accounting.users[3].name: user 'alice' is defined twice "
        "(first at accounting/users-a.yaml:3:8)"]


def test_an_account_defined_twice_in_one_file_names_both_lines(state: Path) -> None:
    (state / "accounting" / "tree.yaml").write_text(TREE + "    - {name: ml, parent: root}\n")
    errors = _errors(state)
    assert [str(e) for e in errors] == [
        "accounting/tree.yaml:8:8: accounting.accounts[2].name: account 'ml' is defined twice "
        "(first at accounting/tree.yaml:6:8)"]


def test_a_setting_of_the_section_in_two_files_is_refused_with_both_places(state: Path) -> None:
    (state / "accounting" / "tree.yaml").write_text(TREE)
    (state / "accounting" / "users.yaml").write_text("accounting:\n  prune: true\n" + _users(["alice"])[12:])
    errors = _errors(state)
    assert [str(e) for e in errors] == [
        "accounting/users.yaml:2:3: accounting.prune: defined twice (first at accounting/tree.yaml:2:3): "
        "accounting.prune may be set in one file only"]


def test_a_file_that_did_not_load_comes_before_the_errors_it_causes_and_those_are_counted(state: Path) -> None:
    """The tree's file sorts after the users' and is broken: its error is first, the 40 follow-ons summarised."""
    (state / "accounting" / "a-users.yaml").write_text(_users([f"user{i:02d}" for i in range(40)]))
    (state / "accounting" / "z-tree.yaml").write_text(BROKEN_TREE)
    errors = _errors(state)
    assert errors[0].location is not None and errors[0].location.file == "accounting/z-tree.yaml"
    assert "invalid YAML" in errors[0].message
    follow = [e for e in errors if "is not an account here" in e.message]
    assert len(follow) == SHOWN_ALIKE + 1, [str(e) for e in errors]
    assert [e.key_path() for e in follow] == [f"accounting.users[{i}].default_account" for i in range(SHOWN_ALIKE + 1)]
    last = follow[-1].message
    assert f"here and at {40 - SHOWN_ALIKE - 1} more place(s) after this one, not shown" in last, last
    assert "may follow from the 1 error(s) listed first" in last, last


def test_validate_prints_the_root_cause_first(state: Path) -> None:
    """`reconciler validate`: the first error line is the broken file, not one of the errors it causes."""
    (state / "accounting" / "a-users.yaml").write_text(_users([f"user{i:02d}" for i in range(40)]))
    (state / "accounting" / "z-tree.yaml").write_text(BROKEN_TREE)
    result = CliRunner().invoke(cli, ["validate", str(state)])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert lines[0].startswith("error: accounting/z-tree.yaml:"), lines[:3]
    assert len(lines) == 1 + SHOWN_ALIKE + 1, lines


def test_the_same_error_at_many_places_is_summarised_without_a_root_cause(state: Path) -> None:
    """Forty users naming one undeclared account: five shown, the sixth carries the count, no 'root' claimed."""
    (state / "accounting" / "tree.yaml").write_text(TREE)
    (state / "accounting" / "users.yaml").write_text(_users([f"user{i:02d}" for i in range(40)], "mll"))
    errors = _errors(state)
    assert len(errors) == SHOWN_ALIKE + 1, [str(e) for e in errors]
    assert errors[0].message == "account 'mll' is not an account here (did you mean ml?)"
    assert errors[-1].message.endswith(f"(here and at {40 - SHOWN_ALIKE - 1} more place(s) after this one, "
                                       "not shown)")


def test_an_oversized_file_names_the_knob_and_the_knob_raises_the_limit(state: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (state / "accounting" / "tree.yaml").write_text(TREE)
    users = state / "accounting" / "users.yaml"
    users.write_text(_users([f"user{i:04d}" for i in range(3000)]))
    size = users.stat().st_size
    monkeypatch.setenv("RECONCILER_YAML_MAX_FILE_BYTES", str(size - 1))
    errors = _errors(state)
    assert len(errors) == 1, [str(e) for e in errors]
    assert str(errors[0]).startswith(f"accounting/users.yaml:1:1: (top level): over limits: file of {size} bytes")
    assert "RECONCILER_YAML_MAX_FILE_BYTES" in errors[0].message
    monkeypatch.setenv("RECONCILER_YAML_MAX_FILE_BYTES", str(size))
    acct = load_dir(state).state.accounting
    assert acct is not None and len(acct.users) == 3000


def test_bench_accounting_scale_plans_everything_then_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.accounting_scale` at small N: all created from a fresh database, nothing when converged."""
    assert bench_main(["--users", "300", "--accounts", "60", "--runs", "1"]) == 0
    head, row = capsys.readouterr().out.splitlines()[:2]
    assert head.split()[:3] == ["users", "accts", "files"]
    cells = row.split()
    assert cells[:2] == ["300", "60"]
    # 5 QOS + 60 accounts + 300 users created; converged: nothing; 1% drifted: 3 updates
    assert (cells[7], cells[9], cells[11]) == ("365", "0", "3"), row
