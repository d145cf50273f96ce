"""Every GPU's history across the fleet: readings by UUID, ranking, RMA candidates (docs/gpu-fleet.md)."""
