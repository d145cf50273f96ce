"""Drivers: one module per managed thing (facts -> changes)."""

from __future__ import annotations

from reconciler.drivers.accounting import AccountingDriver
from reconciler.drivers.base import Driver
from reconciler.drivers.enroot_images import EnrootImagesDriver
from reconciler.drivers.kernel_modules import KernelModulesDriver
from reconciler.drivers.managed_files import ManagedFilesDriver
from reconciler.drivers.mounts import MountsDriver
from reconciler.drivers.munge_key import MungeKeyDriver
from reconciler.drivers.nfs_exports import NfsExportsDriver
from reconciler.drivers.node_state import NodeStateDriver
from reconciler.drivers.packages import PackagesDriver
from reconciler.drivers.patches import PatchesDriver
from reconciler.drivers.services import ServicesDriver
from reconciler.drivers.slurm_config import SlurmConfigDriver
from reconciler.drivers.slurm_upgrade import SlurmUpgradeDriver
from reconciler.drivers.sysctls import SysctlsDriver


def all_drivers() -> list[Driver]:
    """Every driver, in apply order."""
    return [NfsExportsDriver(), MountsDriver(), MungeKeyDriver(), KernelModulesDriver(), SysctlsDriver(),
            SlurmConfigDriver(), ManagedFilesDriver(),
            ServicesDriver(), PackagesDriver(), SlurmUpgradeDriver(), PatchesDriver(), EnrootImagesDriver(),
            NodeStateDriver(), AccountingDriver()]


__all__ = ["Driver", "all_drivers"]
