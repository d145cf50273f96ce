"""reconciler.common.isolate: a child under CPU-time, memory and wall-clock limits; the parent always goes on."""

from __future__ import annotations

import time

import pytest

from reconciler.common.isolate import ChildFailed, LimitExceeded, Limits, run_limited


def _spin() -> None:
    while True:
        pass


def _grab() -> list[bytes]:
    chunks = []
    while True:
        chunks.append(b"x" * (16 << 20))


def _sleep() -> None:
    time.sleep(60)


def _answer(x: int) -> dict[str, int]:
    return {"answer": x * 2}


def _boom() -> None:
    raise RuntimeError("renderer bug")


@pytest.mark.parametrize(("fn", "limits", "which", "named"), [
    (_spin, Limits(cpu_seconds=1, memory_bytes=1 << 30, wall_seconds=30), "cpu", "CPU-time limit of 1 s"),
    (_grab, Limits(cpu_seconds=30, memory_bytes=200 << 20, wall_seconds=30), "memory", "memory limit of 200 MiB"),
    (_sleep, Limits(cpu_seconds=30, memory_bytes=1 << 30, wall_seconds=1), "wall", "wall-clock limit of 1 s"),
])
def test_each_limit_is_named(fn, limits: Limits, which: str, named: str) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as caught:
        run_limited(fn, (), limits)
    took = time.monotonic() - started
    print(f"{which}: stopped after {took:.2f} s")
    assert caught.value.which == which
    assert named in str(caught.value)
    assert took < 15


def test_result_and_failure_come_back() -> None:
    limits = Limits(cpu_seconds=5, memory_bytes=256 << 20, wall_seconds=10)
    assert run_limited(_answer, (21,), limits) == {"answer": 42}
    with pytest.raises(ChildFailed, match="RuntimeError: renderer bug"):
        run_limited(_boom, (), limits)
