"""Drivers: one module per managed thing (facts -> changes); the phase table (phases.py) lists them."""

from __future__ import annotations

from importlib import import_module
from typing import cast

from reconciler.drivers.base import Driver
from reconciler.drivers.phases import PHASES


def all_drivers() -> list[Driver]:
    """Every driver of the phase table, in its order (the order the engine asks them)."""
    made = []
    for row in PHASES.values():
        if row.driver:
            module, _, name = row.driver.rpartition(".")
            made.append(cast(Driver, vars(import_module(module))[name]()))
    return made


__all__ = ["Driver", "all_drivers"]
