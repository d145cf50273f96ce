"""The reconcile engine: gather facts, plan changes, apply them in phases."""
