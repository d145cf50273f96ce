"""Helpers shared by the renderers: value formatting and the header comment."""

from __future__ import annotations

from collections.abc import Iterable

SlurmValue = str | int | float | bool | None


def slurm_value(value: SlurmValue) -> str:
    """Format a value the way slurm.conf expects it (quotes when it holds spaces)."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    text = str(value)
    if any(ch.isspace() for ch in text) or "#" in text:
        return '"' + text.replace('"', '\\"') + '"'
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
