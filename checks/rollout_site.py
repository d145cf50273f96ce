"""The rollout's site on a Slurm cluster (engine/workload.py `RolloutSite`): every driver, Slurm as the workload
manager (drivers/slurm_workload.py), the gates (checks/gates.py) and the upgrade machine's hooks
(checks/upgrade_gates.py). What reconciler/cli and reconciler/daemon hand to the rollout, which knows no Slurm."""

from __future__ import annotations

from reconciler.checks.gates import Gates, gate_timeout
from reconciler.checks.upgrade_gates import RealHooks
from reconciler.drivers import all_drivers
from reconciler.drivers.slurm_workload import SlurmWorkload
from reconciler.engine.workload import RolloutSite


def slurm_site() -> RolloutSite:
    """The site of a rollout on a Slurm cluster."""
    return RolloutSite(
        drivers=all_drivers(), workload=SlurmWorkload(),
        gates=lambda loaded, transport, stop, log: Gates(loaded, transport, gate_timeout(loaded.state), stop, log),
        hooks=lambda loaded, config, transport, options, gates, log: RealHooks(loaded, config, transport, options,
                                                                               gates, log).hooks())
