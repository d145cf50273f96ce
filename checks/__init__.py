"""Health checks: node checks and NCCL bandwidth runs."""
