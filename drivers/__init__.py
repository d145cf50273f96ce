"""Drivers: one module per managed thing (facts -> changes)."""

from __future__ import annotations

from drivers.base import Driver
from drivers.enroot_images import EnrootImagesDriver
from drivers.mounts import MountsDriver
from drivers.nfs_exports import NfsExportsDriver
from drivers.node_state import NodeStateDriver
from drivers.patches import PatchesDriver
from drivers.slurm_config import SlurmConfigDriver


def all_drivers() -> list[Driver]:
    """Every driver, in apply order."""
    return [NfsExportsDriver(), MountsDriver(), SlurmConfigDriver(), PatchesDriver(), EnrootImagesDriver(),
            NodeStateDriver()]


__all__ = ["Driver", "all_drivers"]
