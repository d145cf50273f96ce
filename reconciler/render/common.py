"""Helpers shared by the renderers: value formatting and the header comment."""

from __future__ import annotations

from collections.abc import Iterable

SlurmValue = str | int | float | bool | None


def slurm_value(value: SlurmValue) -> str:
    """Format a value the way Slurm's parser reads it back: `\\` and `#` escaped, quotes when it holds spaces.

    The schema (reconciler/model/values.py) has already refused what Slurm cannot read back: control characters,
    `"` and empty values.
    """
    if isinstance(value, bool):
        return "YES" if value else "NO"
    text = str(value).replace("\\", "\\\\").replace("#", "\\#")
    if " " in text:
        return f'"{text}"'
    return text


def yes_no(value: SlurmValue) -> str:
    """Format a boolean as cgroup.conf's yes/no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return slurm_value(value)


def key_values(pairs: Iterable[tuple[str, SlurmValue]]) -> str:
    """Join key=value pairs with spaces, skipping unset values."""
    return " ".join(f"{key}={slurm_value(value)}" for key, value in pairs if value is not None)


def header(what: str, source: str) -> str:
    """The comment at the top of every managed file: what wrote it and from where."""
    return (
        f"# {what}: managed by reconciler from {source}.\n"
        "# Do not edit by hand: the reconciler reports and reverts changes made here.\n"
    )
