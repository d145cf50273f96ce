"""Root conftest: the testbed fixtures (tests/testbed_fixture.py) for every integration test."""

pytest_plugins = ["tests.testbed_fixture", "tests.wheel_fixture"]
