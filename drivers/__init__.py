"""Drivers: one module per managed thing (facts -> operations)."""
