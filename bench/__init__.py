"""Benchmarks of issue 8: `python -m bench` runs them all (bench/README.md); figures, not timed tests."""
