"""The names of a multi-cluster repository over generated strings (issue 43 item 3): promotion.yaml's clusters and
`after`, overlay.yaml's bases, and the cluster directories themselves.

A name is refused with the file:line of the YAML that holds it (a directory: by name, as no line holds it), or it is
one the repository has and that --cluster, a daemon's `cluster:` and the PR comment markers can carry: letters,
digits, '_', '.', '-', not starting with '.' or '-', no newline.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings

from reconciler.cli.main import main
from reconciler.desired.clusters import bad_name, load_cluster, read_promotion
from reconciler.desired.errors import DesiredStateError
from tests.desired.cluster_repo import two_cluster_repo
from tests.desired.hostile.test_connection_fields import HOSTILE, _quoted

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Clusters a and b on bases/common."""
    return two_cluster_repo(tmp_path_factory.mktemp("clusters") / "repo")


@given(key=HOSTILE, after=HOSTILE)
def test_promotion_names_are_refused_at_their_line_or_are_clusters(repo: Path, key: str, after: str) -> None:
    (repo / "promotion.yaml").write_text(f"promotion:\n  {_quoted(key)}: {{after: {_quoted(after)}}}\n")
    try:
        rules = read_promotion(repo)
    except DesiredStateError as exc:
        assert exc.errors and all(e.location is not None and e.location.file == "promotion.yaml"
                                  and e.location.line == 2 for e in exc.errors), [str(e) for e in exc.errors]
        return
    finally:
        (repo / "promotion.yaml").unlink()
    assert set(rules) <= {"a", "b"} and {r.after for r in rules.values()} <= {"a", "b"}, rules


@settings(max_examples=60)
@given(base=HOSTILE)
def test_overlay_base_names_are_refused_at_their_line_or_are_bases(repo: Path, base: str) -> None:
    overlay = repo / "clusters" / "a" / "overlay.yaml"
    overlay.write_text(f"bases:\n  - {_quoted(base)}\n")
    try:
        load_cluster(repo, "a")
    except DesiredStateError as exc:
        named = [e for e in exc.errors if e.path == ("bases", 0)]
        assert named and all(e.location is not None and str(e.location).startswith("clusters/a/overlay.yaml:2:")
                             for e in named), [str(e) for e in exc.errors]
        return
    finally:
        overlay.write_text("bases: [common]\n")
    assert base == "common"


@settings(max_examples=40)
@given(name=HOSTILE.filter(lambda n: "/" not in n and "\x00" not in n and n not in (".", "..")))
def test_a_cluster_directory_is_refused_by_name_or_can_be_named(repo: Path, name: str) -> None:
    if name in ("a", "b") or name.startswith("."):  # the repository's own; a hidden directory is not a cluster
        return
    directory = repo / "clusters" / name
    shutil.copytree(repo / "clusters" / "a", directory)
    (directory / "cluster.yaml").write_text("cluster:\n  name: generated\n")
    try:
        result = CliRunner().invoke(main, ["validate", str(repo)])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception  # no traceback
        if bad_name(name) is None:
            assert NAME.fullmatch(name) and "\n" not in name, name
            assert result.exit_code == 0 and f"[cluster {name}]: valid" in result.stdout, result.output
        else:
            assert result.exit_code == 1 and "is not a cluster name" in result.stderr, result.output
            assert ascii(name)[1:-1] in result.stderr  # shown escaped: nothing reaches the terminal as is
            assert all(c.isprintable() or c == "\n" for c in result.output), result.output
            with pytest.raises(DesiredStateError):
                load_cluster(repo, name)
    finally:
        shutil.rmtree(directory)
