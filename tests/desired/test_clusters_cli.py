"""The commands of a multi-cluster repository (issue 37): validate, --cluster, explain, promotion.yaml.

The real command line through click's CliRunner, on real files in temporary directories (no node is reached:
each case fails or finishes before a connection).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli.main import main
from reconciler.desired.clusters import read_promotion
from reconciler.desired.errors import DesiredStateError
from tests.desired.cluster_repo import two_cluster_repo
from tests.desired_fixtures import EXAMPLE


def _run(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), env=env)


def test_validate_checks_every_cluster_one_line_each(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    result = _run("validate", str(root))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{root} [cluster a]: valid (9 files, 3 inventory entries, 2 partitions)",
        f"{root} [cluster b]: valid (9 files, 3 inventory entries, 2 partitions)"]


def test_validate_names_the_failing_cluster_and_still_validates_the_others(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "clusters" / "b" / "cluster.yaml").write_text(
        'cluster:\n  name: b\n  partitions:\n    - name: debug\n      MaxTime: "soon"\n')
    (root / "clusters" / "a" / "cluster.yaml").write_text("cluster:\n  name: a\n  nope: 1\n")
    result = _run("validate", str(root))
    assert result.exit_code == 1
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert any(line.startswith("error: [cluster b] clusters/b/cluster.yaml:5:7: cluster.partitions[1].MaxTime:")
               for line in errors), result.stderr
    assert any(line.startswith("error: [cluster a] clusters/a/cluster.yaml:3:3: cluster.nope:") for line in errors)
    assert f"{root}: not valid: a, b" in result.stderr


def test_validate_one_cluster_with_the_option_or_the_environment(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    result = _run("validate", str(root), "--cluster", "b")
    assert result.exit_code == 0 and result.stdout.splitlines() == [
        f"{root} [cluster b]: valid (9 files, 3 inventory entries, 2 partitions)"]
    result = _run("validate", str(root), env={"RECONCILER_CLUSTER": "a"})
    assert result.exit_code == 0 and "[cluster a]" in result.stdout and "[cluster b]" not in result.stdout


def test_the_single_cluster_validate_output_is_unchanged() -> None:
    result = _run("validate", str(EXAMPLE))
    assert result.exit_code == 0
    assert result.stdout == f"{EXAMPLE}: valid (7 files, 3 inventory entries, 2 partitions)\n"


def test_plan_without_cluster_in_a_multi_cluster_repository_lists_the_clusters(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    for command in (["plan", str(root)], ["render", str(root), "--node", "dgx01"], ["apply", str(root)],
                    ["check", str(root)], ["facts", str(root)]):
        result = _run(*command)
        assert result.exit_code == 1, (command, result.output)
        assert "this repository holds clusters a, b: name one with --cluster" in result.stderr, command


def test_plan_with_an_unknown_or_malformed_cluster_is_a_clear_error(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    result = _run("plan", str(root), "--cluster", "c")
    assert result.exit_code == 1 and "no cluster 'c'" in result.stderr and "(clusters: a, b)" in result.stderr
    result = _run("plan", str(root), "--cluster", "../a")
    assert result.exit_code == 2 and "'../a' is not a cluster name" in result.stderr
    result = _run("plan", str(EXAMPLE), "--cluster", "a")
    assert result.exit_code == 1 and "single-cluster desired state" in result.stderr


def test_render_takes_the_cluster(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    conf = {name: _run("render", str(root), "--cluster", name, "--node", "login01", "--file", "slurm.conf")
            for name in ("a", "b")}
    assert conf["a"].exit_code == 0 and conf["b"].exit_code == 0, conf["b"].output
    assert "ClusterName=a" in conf["a"].stdout and "ClusterName=b" in conf["b"].stdout
    assert "PartitionName=debug" in conf["a"].stdout
    debug = {n: next(line for line in r.stdout.splitlines() if line.startswith("PartitionName=debug"))
             for n, r in conf.items()}
    assert "MaxTime=01:00:00" in debug["a"] and "MaxTime=02:00:00" in debug["b"]


def test_explain_prints_the_value_where_it_was_set_and_what_it_overrode(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    result = _run("explain", "cluster.partitions.debug.max_time", str(root), "--cluster", "b")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["cluster.partitions.debug.max_time = 02:00:00",
                                          "  set at clusters/b/cluster.yaml:5:7",
                                          "  overrides 01:00:00 at bases/common/cluster.yaml:46:7"]
    result = _run("explain", "cluster.partitions.1.MaxTime", str(root), "--cluster", "a")
    assert result.stdout.splitlines() == ["cluster.partitions.1.MaxTime = 01:00:00",
                                          "  set at bases/common/cluster.yaml:46:7"]


def test_explain_of_a_default_and_of_a_missing_key(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    result = _run("explain", "cluster.partitions.debug.default", str(root), "--cluster", "a")
    assert result.exit_code == 0
    assert "not set in any file: the default (the enclosing key is at bases/common/cluster.yaml:44:7)" \
        in result.stdout
    result = _run("explain", "cluster.partitions.nope.MaxTime", str(root), "--cluster", "a")
    assert result.exit_code == 1
    assert "no item 'nope' in this list of 2 (names: gpu, debug)" in result.stderr


def test_explain_works_on_a_single_cluster_directory() -> None:
    result = _run("explain", "cluster.name", str(EXAMPLE))
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["cluster.name = dgx-pod", "  set at cluster.yaml:4:3"]


# ---- promotion.yaml -----------------------------------------------------------------------------------------

def test_promotion_is_read_and_shown_by_validate(tmp_path: Path) -> None:
    root = two_cluster_repo(tmp_path)
    assert read_promotion(root) == {}
    (root / "promotion.yaml").write_text("promotion:\n  b: {after: a, soak: 30m}\n")
    rules = read_promotion(root)
    assert rules["b"].after == "a" and rules["b"].soak == timedelta(minutes=30)
    result = _run("validate", str(root))
    assert result.exit_code == 0 and f"{root}: promotion: b after a, soak 30m" in result.stdout


@pytest.mark.parametrize(("text", "where", "message"), [
    ("promotion:\n  b: {after: c}\n", "promotion.yaml:2:7", "after: no cluster 'c' in this repository"),
    ("promotion:\n  c: {after: a}\n", "promotion.yaml:2:3", "no cluster 'c' in this repository"),
    ("promotion:\n  a: {after: b}\n  b: {after: a}\n", "promotion.yaml:2:7", "promotion cycle: a -> b -> a"),
    ("promotion:\n  b: {after: b}\n", "promotion.yaml:2:7", "a cluster cannot come after itself"),
    ("promotion:\n  b: {after: a, soak: 30x}\n", "promotion.yaml:2:17", "not a duration"),
    ("promotion:\n  b: {after: a, wait: 1m}\n", "promotion.yaml:2:17", "unknown key"),
    ("promotion:\n  b: {after: a}\n  b: {after: a}\n", "promotion.yaml:3:3", "duplicate key"),
])
def test_a_wrong_promotion_is_an_error_at_its_line(tmp_path: Path, text: str, where: str, message: str) -> None:
    root = two_cluster_repo(tmp_path)
    (root / "promotion.yaml").write_text(text)
    with pytest.raises(DesiredStateError) as info:
        read_promotion(root)
    found = [e for e in info.value.errors if message in e.message]
    assert found and str(found[0].location).startswith(where), [str(e) for e in info.value.errors]
    result = _run("validate", str(root))
    assert result.exit_code == 1 and "not valid: promotion.yaml" in result.stderr


def test_import_with_cluster_writes_into_the_repository_and_validates_that_cluster(tmp_path: Path) -> None:
    from tests.desired_fixtures import MINIMAL_SLURM_CONF

    root = two_cluster_repo(tmp_path / "repo")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "slurm.conf").write_text(MINIMAL_SLURM_CONF)
    result = _run("import", str(tmp_path / "etc"), "--config-dir", "/", "--out", str(root), "--cluster", "c",
                  "--slurm-version", "23.11")
    assert result.exit_code == 0, result.output
    assert (root / "clusters" / "c" / "cluster.yaml").is_file() and not (root / "cluster.yaml").exists()
    assert f"then `reconciler plan {root} --cluster c`" in result.stdout
    result = _run("validate", str(root))
    assert result.exit_code == 0 and f"{root} [cluster c]: valid" in result.stdout


def test_the_documented_example_repository_validates_and_merges_as_documented() -> None:
    example = EXAMPLE.parent / "docs" / "examples" / "multi-cluster"
    result = _run("validate", str(example))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{example} [cluster production]: valid (7 files, 2 inventory entries, 3 partitions)",
        f"{example} [cluster staging]: valid (7 files, 2 inventory entries, 2 partitions)",
        f"{example}: promotion: production after staging, soak 30m"]
    result = _run("explain", "cluster.partitions.gpu.MaxTime", str(example), "--cluster", "staging")
    assert result.stdout.splitlines()[1:] == ["  set at clusters/staging/cluster.yaml:14:7",
                                              "  overrides 2-00:00:00 at bases/h100/cluster.yaml:11:7"]
    conf = _run("render", str(example), "--cluster", "production", "--node", "login01", "--file", "slurm.conf")
    partitions = [line.split()[0] for line in conf.stdout.splitlines() if line.startswith("PartitionName=")]
    assert partitions == ["PartitionName=gpu", "PartitionName=debug", "PartitionName=long"]


def test_secret_encrypt_takes_the_cluster_and_its_merged_recipients(tmp_path: Path) -> None:
    import pyrage

    from reconciler.desired.agesecrets import AgeError, Encrypted, decrypt

    keys = {name: pyrage.x25519.Identity.generate() for name in ("a", "b")}
    root = two_cluster_repo(tmp_path / "repo")
    (root / "bases" / "common" / "secrets.yaml").write_text(f"secrets:\n  recipients: [{keys['a'].to_public()}]\n")
    (root / "clusters" / "b" / "secrets.yaml").write_text(f"secrets:\n  recipients: [{keys['b'].to_public()}]\n")
    (tmp_path / "plain").write_text("s3cret\n")
    result = _run("secret", "encrypt", str(root), str(tmp_path / "plain"), "-o", str(tmp_path / "x.age"))
    assert result.exit_code == 1 and "this repository holds clusters a, b: name one with --cluster" in result.stderr
    for name in ("a", "b"):
        out = tmp_path / f"{name}.age"
        result = _run("secret", "encrypt", str(root), str(tmp_path / "plain"), "-o", str(out), "--cluster", name)
        assert result.exit_code == 0, result.output
        assert decrypt(Encrypted.of(out.name, out.read_bytes()), [keys[name]], "key") == b"s3cret\n"
    other = tmp_path / "b.age"
    with pytest.raises(AgeError):  # cluster b's file is not encrypted to cluster a's (the base's) recipient
        decrypt(Encrypted.of(other.name, other.read_bytes()), [keys["a"]], "key a")
