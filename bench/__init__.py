"""Benchmarks (run as modules, e.g. `python -m bench.render_scale`); figures, not timed tests."""
