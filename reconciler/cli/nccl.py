"""The ``nccl`` click group: ``nccl parse FILE [--format text|json]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from reconciler.checks.nccl.models import NcclRow, NcclRun, NcclTest
from reconciler.checks.nccl.parser import parse_file
from reconciler.checks.nccl.verdict import format_size


def row_summary(row: NcclRow) -> dict[str, Any]:
    """The JSON object of one row: size, out-of-place and in-place busbw, wrong count."""
    return {"size": row.size, "oop_busbw": row.oop_busbw, "ip_busbw": row.ip_busbw, "wrong": row.wrong}


def test_summary(test: NcclTest) -> dict[str, Any]:
    """The JSON object of one test."""
    return {
        "collective": test.collective,
        "rows": [row_summary(row) for row in test.rows],
        "out_of_bounds": test.out_of_bounds,
        "avg_busbw": test.avg_busbw,
    }


def run_summary(run: NcclRun) -> dict[str, Any]:
    """The JSON document printed by ``nccl parse --format json``."""
    return {"tests": [test_summary(test) for test in run.tests], "errors": run.all_errors()}


def _number(value: float | int | None, spec: str) -> str:
    """A number formatted with spec, or N/A."""
    return "N/A" if value is None else format(value, spec)


def _test_title(test: NcclTest) -> str:
    """First line of a test in text output."""
    details = [d for d in (test.binary, test.tool) if d]
    if test.nranks:
        details.append(f"{test.nranks} ranks")
    details.append(f"layout {test.layout}")
    return f"{test.collective} ({', '.join(details)})"


def test_lines(test: NcclTest) -> list[str]:
    """Text output of one test."""
    lines = [
        _test_title(test),
        f"  {'size':>10} {'bytes':>12} {'oop busbw':>10} {'ip busbw':>10} {'wrong':>7}",
    ]
    for row in test.rows:
        lines.append(
            f"  {format_size(row.size):>10} {row.size:>12} {_number(row.oop_busbw, '.2f'):>10} "
            f"{_number(row.ip_busbw, '.2f'):>10} {_number(row.wrong, 'd'):>7}"
        )
    lines.append(f"  out of bounds values: {_number(test.out_of_bounds, 'd')}")
    avg = "N/A" if test.avg_busbw is None else f"{test.avg_busbw:g} GB/s"
    lines.append(f"  avg bus bandwidth: {avg}")
    lines.append(f"  errors: {'; '.join(test.errors) if test.errors else 'none'}")
    return lines


def run_lines(run: NcclRun) -> list[str]:
    """Text output of a whole run."""
    lines: list[str] = []
    for test in run.tests:
        lines += [*test_lines(test), ""]
    lines.append(f"errors: {'; '.join(run.errors) if run.errors else 'none'}")
    return lines


@click.group("nccl")
def nccl() -> None:
    """Read nccl-tests outputs."""


@nccl.command("parse")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def parse_command(file: Path, fmt: str) -> None:
    """Print what the parser read from a saved nccl-tests output (text or -J JSON).

    Exits 0 when the output parsed without errors, 1 otherwise.
    """
    run = parse_file(file)
    if fmt == "json":
        click.echo(json.dumps(run_summary(run), indent=2))
    else:
        click.echo("\n".join(run_lines(run)))
    click.get_current_context().exit(0 if run.ok else 1)
