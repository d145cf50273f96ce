"""Failpoints: parsed from the environment, a no-op when unset."""

from __future__ import annotations

import time

import pytest

from reconciler.common.failpoints import ENV, failpoint, parse


def test_parse_keeps_well_formed_terms_only() -> None:
    assert parse("a.b=sleep(2); c-d = sleep(0.5);bad=exit(1);=sleep(1);e=sleep(x)") == {"a.b": 2.0, "c-d": 0.5}


def test_failpoint_sleeps_only_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    started = time.monotonic()
    failpoint("wave.after-apply")
    assert time.monotonic() - started < 0.1
    monkeypatch.setenv(ENV, "wave.after-apply=sleep(0.3)")
    started = time.monotonic()
    failpoint("wave.before-apply")
    assert time.monotonic() - started < 0.1
    failpoint("wave.after-apply")
    assert time.monotonic() - started >= 0.3
