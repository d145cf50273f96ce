"""The apply order in one table (as gitops-engine's `kindOrder`): every driver's phase, and why it sits there.

The Applier applies a plan phase by phase, lowest first; a phase's follow-up steps (restarts, reloads, commands)
run after its changes. Two drivers may share a phase when their changes must land before the same follow-ups.
A driver reads its number from here (`PHASES["mounts"].number`); no phase number is written anywhere else.
The table is also the registry: a row's `driver` is the class `all_drivers()` makes, in the table's order, which
is the order the engine asks them (reviews and follow-ups see the plan in that order: the packages driver before
the Slurm upgrade, which orders its changes; a driver spanning phases sits on one of its rows).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    """A place in the apply order and the reason for it."""

    number: int
    why: str
    driver: str = ""  # the driver class of this row, dotted (imported by all_drivers(): no import circle)


PHASES: dict[str, Phase] = {
    "nfs_exports": Phase(10, "an export exists before any node mounts it",
                         driver="reconciler.drivers.nfs_exports.NfsExportsDriver"),
    "mounts": Phase(20, "after the exports they mount; before the files, images and checks that live on them",
                    driver="reconciler.drivers.mounts.MountsDriver"),
    "munge_key": Phase(25, "before Slurm's files and restarts: nodes with different keys cannot talk",
                       driver="reconciler.drivers.munge_key.MungeKeyDriver"),
    "kernel_modules": Phase(26, "before managed files and services: a service may need the module and its options",
                            driver="reconciler.drivers.kernel_modules.KernelModulesDriver"),
    "sysctls": Phase(27, "with the kernel settings, before the services that read them",
                     driver="reconciler.drivers.sysctls.SysctlsDriver"),
    "slurm_config": Phase(30, "with the managed files: a slurmd restart either asks for runs once, after both wrote",
                          driver="reconciler.drivers.slurm_config.SlurmConfigDriver"),
    "managed_files": Phase(30, "with Slurm's files (above)",
                           driver="reconciler.drivers.managed_files.ManagedFilesDriver"),
    "motd": Phase(30, "with the managed files (a plain file; no follow-up reads it)",
                  driver="reconciler.drivers.motd.MotdDriver"),
    "services": Phase(35, "after the files and units they run",
                      driver="reconciler.drivers.services.ServicesDriver"),
    "package_refresh": Phase(35, "the package metadata refreshed after the repository files (30) and before every "
                             "package transaction (36-39): a phase's follow-ups run after its changes"),
    "slurmdbd_backup": Phase(36, "the accounting database backed up (slurmdbd stopped) before slurmdbd moves"),
    "slurmdbd": Phase(37, "slurmdbd first of Slurm's daemons (upgrades.html: it takes the newer RPCs first)"),
    "slurmctld": Phase(38, "the controllers after slurmdbd, before any slurmd (slurmd never newer than slurmctld)"),
    "packages": Phase(38, "every other package transaction; a Slurm one is moved to 37-39 by the Slurm upgrade",
                      driver="reconciler.drivers.packages.PackagesDriver"),
    "slurmd": Phase(39, "slurmd and the commands last, after the controllers (the Slurm upgrade's row: asked "
                    "after the packages driver, whose changes it orders)",
                    driver="reconciler.drivers.slurm_upgrade.SlurmUpgradeDriver"),
    "patches": Phase(40, "after the packages that install the files they patch",
                     driver="reconciler.drivers.patches.PatchesDriver"),
    "enroot_images": Phase(50, "after the mounts and packages the images and enroot need",
                           driver="reconciler.drivers.enroot_images.EnrootImagesDriver"),
    "node_state": Phase(60, "drains and resumes after everything a node's state depends on",
                        driver="reconciler.drivers.node_state.NodeStateDriver"),
    "accounting_qos": Phase(80, "accounting last (slurmdbd answers by then); QOS before the accounts naming them",
                            driver="reconciler.drivers.accounting.AccountingDriver"),
    "accounting_accounts": Phase(81, "accounts before the users in them"),
    "accounting_users": Phase(90, "users after their accounts and QOS"),
    "accounting_delete_users": Phase(91, "removals in the reverse order: users first"),
    "accounting_delete_accounts": Phase(92, "then the accounts they were in"),
    "accounting_delete_qos": Phase(99, "then the QOS no account names any more"),
}


def phase(name: str) -> int:
    """The phase number of NAME (KeyError: not in the table)."""
    return PHASES[name].number
