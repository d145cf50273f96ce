"""The `reconciler` command line: the console script here, one module per command group beside it."""

from __future__ import annotations

from reconciler.cli import startup


def main() -> None:
    """The `reconciler` console script: start cheaply (`startup.begin`), then run the command group."""
    startup.begin()
    from reconciler.cli.main import main as command_group

    command_group()
