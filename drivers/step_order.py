"""The order of follow-up steps within one phase, in one table: lower runs first (the engine sorts each phase's
steps by it, engine/followups.py). The engine's own defaults are generic (a command before a service); the rest is
Slurm's start-up order, which only the drivers know.
"""

from __future__ import annotations

from reconciler.engine.followups import ORDER_COMMAND, ORDER_SERVICE

# munge before slurmctld before slurmd: every Slurm daemon authenticates through munge, so munge runs with the
# new key before a daemon restarted on it talks to another (munge(7), Slurm's quickstart "start munge first").
ORDER_MUNGE = 20
# slurmctld before the slurmds: a slurmd registers with the controller it finds on start (slurmd(8)).
ORDER_CONTROLLER = 30
# `scontrol reconfigure` after any slurmctld (re)start of its phase: a restarted slurmctld does not make the
# slurmds re-read their files, the reconfigure does (scontrol.1: "Instruct all slurmctld and slurmd daemons").
ORDER_RECONFIGURE = 35
ORDER_COMPUTE = 60  # the slurmds last, after any other service of the phase (ORDER_SERVICE)

__all__ = ["ORDER_COMMAND", "ORDER_COMPUTE", "ORDER_CONTROLLER", "ORDER_MUNGE", "ORDER_RECONFIGURE", "ORDER_SERVICE"]
