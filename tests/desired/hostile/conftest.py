"""Hypothesis profile for the property suites: fixed seed (derandomize), bounded examples, no deadline."""

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, max_examples=150, deadline=None, print_blob=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")
