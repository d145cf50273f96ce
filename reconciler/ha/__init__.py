"""Two login nodes, one acting reconciler: a lease on the Slurm controller, roles, fencing, the crash journal."""
