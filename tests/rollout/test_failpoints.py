"""Failpoints: parsed from the environment, a no-op when unset."""

from __future__ import annotations

import time

import pytest

from reconciler.common.failpoints import ENV, failpoint, parse


def test_parse_keeps_well_formed_terms_only() -> None:
    assert parse("a.b=sleep(2); c-d = sleep(0.5);bad=exit(1);=sleep(1);e=sleep(x)") == {"a.b": 2.0, "c-d": 0.5}


def test_failpoint_sleeps_only_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # what it would sleep, recorded instead of timed
    monkeypatch.delenv(ENV, raising=False)
    failpoint("wave.after-apply")
    assert slept == []
    monkeypatch.setenv(ENV, "wave.after-apply=sleep(0.3)")
    failpoint("wave.before-apply")
    assert slept == []
    failpoint("wave.after-apply")
    assert slept == [0.3]
