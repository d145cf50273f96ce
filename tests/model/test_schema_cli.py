"""`reconciler schema` (a valid JSON Schema, kept in deploy/, used by the examples), --version and --help."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from reconciler import __version__
from reconciler.cli.main import main
from tests.desired_fixtures import EXAMPLE, REPO

SCHEMA_FILE = REPO / "deploy" / "desired-state.schema.json"
MODELINE = "# yaml-language-server: $schema=../deploy/desired-state.schema.json"
EXAMPLE_FILES = sorted(EXAMPLE.glob("*.yaml"))

jsonschema = pytest.importorskip("jsonschema", reason="pip install -e '.[dev]' for jsonschema")


def _schema_output() -> str:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0, result.output
    return result.stdout


def _validator() -> Any:
    schema = json.loads(_schema_output())
    return jsonschema.Draft202012Validator(schema)


def test_schema_is_valid_json_schema() -> None:
    """The output is JSON and a valid draft 2020-12 schema describing the top-level keys."""
    schema = json.loads(_schema_output())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert {"cluster", "nodes", "storage", "images", "patches", "checks", "ssh"} <= set(schema["properties"])
    assert "required" not in schema  # each file holds only some of the top-level keys


def test_schema_file_in_deploy_is_up_to_date() -> None:
    """deploy/desired-state.schema.json is exactly what `reconciler schema` prints (regenerate it if not)."""
    assert SCHEMA_FILE.read_text() == _schema_output(), (
        "deploy/desired-state.schema.json is stale: "
        "run `reconciler schema > deploy/desired-state.schema.json`"
    )


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_file_references_schema(path: Path) -> None:
    """Each example file starts with the yaml-language-server modeline pointing at the schema file."""
    assert path.read_text().splitlines()[0] == MODELINE
    target = MODELINE.split("$schema=", 1)[1]
    assert (path.parent / target).resolve() == SCHEMA_FILE.resolve()


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_file_validates_against_schema(path: Path) -> None:
    """What an editor sees: every example file on its own is valid under the schema."""
    content = YAML(typ="safe").load(path.read_text())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(content)]
    assert errors == []


@pytest.mark.parametrize(
    "content",
    [
        {"cluster": {"name": "x", "slurm_version": "23.11", "controllers": ["a"], "nam": 1}},
        {"cluster": {"name": "x", "slurm_version": "9.99", "controllers": ["a"]}},
        {"nodes": [{"name": "a", "port": "ssh"}]},
        {"storage": {"mounts": [{"source": "s:/x", "mountpoint": "/x"}]}},
        {"clusters": {}},
    ],
)
def test_schema_rejects_what_the_loader_rejects(content: dict[str, Any]) -> None:
    """Unknown keys, wrong enum values, wrong types and missing required keys fail in the editor too."""
    assert list(_validator().iter_errors(content)) != []


def test_version() -> None:
    """`reconciler --version` prints the package version."""
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"reconciler, version {__version__}"
    assert __version__ == version("reconciler")


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, command in sorted(group.commands.items()):
        out.append((*prefix, name))
        if isinstance(command, click.Group):
            out += _commands(command, (*prefix, name))
    return out


def test_the_foundation_commands_exist() -> None:
    """validate, render and schema are there (other commands may come from later issues)."""
    assert {("validate",), ("render",), ("schema",)} <= set(_commands(main))


@pytest.mark.parametrize("path", [(), *_commands(main)], ids=lambda p: " ".join(p) or "reconciler")
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_on_every_command(path: tuple[str, ...], flag: str) -> None:
    """`--help` (and `-h`) works on the group and on every command, and says how to call it."""
    result = CliRunner().invoke(main, [*path, flag])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: ")
    assert " ".join(("main", *path)) in result.stdout.splitlines()[0]
