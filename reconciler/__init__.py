"""reconciler: declarative GitOps daemon for GPU Slurm clusters."""

__version__ = "0.1.0"
