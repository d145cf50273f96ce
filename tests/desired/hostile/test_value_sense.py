"""Values are checked for sense, not only for type: one property test per class of field (durations, Slurm's
integer ranges, finite floats, cumulative wave sizes, trees), plus file:line for a refusal through the loader."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

from reconciler.daemon.config import DaemonConfig, HAConfig, NotificationsConfig, RetryPolicy
from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.desired.relations import account_cycles, qos_self_preemption, rollout_gates
from reconciler.model import (
    Accounting,
    AccountSpec,
    DcgmCheck,
    GpuExpectation,
    IbExpectation,
    NcclThresholds,
    NodeCheck,
    NodeSet,
    QosSpec,
    Rollout,
    RolloutGates,
)
from reconciler.model.bounds import DAY, U16_MAX, U32_MAX, duration_between, human, parse_duration
from tests.desired_fixtures import EXAMPLE

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def refused(model: type[BaseModel], data: dict[str, Any]) -> str | None:
    """The validation message for DATA, or None when the model takes it."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return str(exc)
    return None


durations = st.one_of(
    st.integers(min_value=-10, max_value=40 * DAY),
    st.builds(lambda n, u: f"{n}{u}", st.integers(min_value=0, max_value=2000), st.sampled_from(list(UNITS))),
)

# (model, field, low, high) of each bounded duration of the desired state and of the daemon's config
DURATION_FIELDS: list[tuple[type[BaseModel], str, dict[str, Any], int, int]] = [
    (RolloutGates, "timeout", {}, 1, DAY),
    (Rollout, "soak", {}, 0, DAY),
    (NodeCheck, "interval", {"name": "n", "nodes": "gpu01"}, 1, 7 * DAY),
    (DcgmCheck, "timeout", {}, 1, DAY),
    (RetryPolicy, "max", {"initial": "1s"}, 1, 7 * DAY),
    (NotificationsConfig, "rate_limit", {"targets": [{"url": "json://localhost/x"}]}, 0, DAY),
]


@pytest.mark.parametrize(("model", "field", "base", "low", "high"), DURATION_FIELDS,
                         ids=[f"{m.__name__}.{f}" for m, f, *_ in DURATION_FIELDS])
@given(value=durations)
def test_durations_are_taken_exactly_inside_their_bounds(model: type[BaseModel], field: str, base: dict[str, Any],
                                                         low: int, high: int, value: str | int) -> None:
    """A duration is taken iff it parses and lies within the field's bounds; a refusal names both bounds."""
    seconds = value if isinstance(value, int) else int(value[:-1]) * UNITS[value[-1]]
    message = refused(model, {**base, field: value})
    if low <= seconds <= high:
        assert message is None, message
    else:
        assert message is not None and f"allowed {human(low)} to {human(high)}" in message, message


@given(text=st.text(max_size=12))
def test_a_duration_that_does_not_parse_is_refused_not_read_as_something(text: str) -> None:
    """Any string is either a duration in bounds (and parses to that) or refused with a reason."""
    adapter: TypeAdapter[Any] = TypeAdapter(duration_between(0, 10 * DAY))
    try:
        adapter.validate_python(text)
    except ValidationError as exc:
        assert "duration" in str(exc) or "at most" in str(exc)
        return
    assert 0 <= parse_duration(text) <= 10 * DAY


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_not_a_duration(value: bool) -> None:
    message = refused(Rollout, {"soak": value})
    assert message is not None and "a number is needed" in message


# (model, base, field, low, high): integers Slurm keeps in C types, and counts a node can have
INT_FIELDS: list[tuple[type[BaseModel], dict[str, Any], str, int, int]] = [
    (NodeSet, {"nodes": "gpu01"}, "CPUs", 1, U16_MAX),
    (NodeSet, {"nodes": "gpu01"}, "Weight", 0, U32_MAX),
    (QosSpec, {"name": "q"}, "priority", 0, U32_MAX),
    (AccountSpec, {"name": "a"}, "fairshare", 0, U32_MAX),
    (GpuExpectation, {}, "count", 0, 128),
    (IbExpectation, {}, "ports", 0, 64),
]


@pytest.mark.parametrize(("model", "base", "field", "low", "high"), INT_FIELDS,
                         ids=[f"{m.__name__}.{f}" for m, _, f, *_ in INT_FIELDS])
@given(value=st.one_of(st.integers(min_value=-5, max_value=2**33),
                       st.sampled_from([-1, 0, 1, U16_MAX, U16_MAX + 1, U32_MAX, U32_MAX + 1, 2**63])))
def test_integers_are_taken_exactly_inside_what_slurm_accepts(model: type[BaseModel], base: dict[str, Any],
                                                              field: str, low: int, high: int, value: int) -> None:
    """A count is taken iff it lies in the range Slurm (or the hardware) can hold."""
    message = refused(model, {**base, field: value})
    assert (message is None) == (low <= value <= high), message


@pytest.mark.parametrize(("model", "base", "field"), [
    (NcclThresholds, {}, "min_busbw"), (NcclThresholds, {}, "min_avg_busbw"),
    (GpuExpectation, {"count": 8}, "nvlink_speed"), (QosSpec, {"name": "q"}, "usage_factor"),
    (IbExpectation, {"ports": 1}, "rate"), (NcclThresholds, {}, "regression_pct"),
])
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_floats_are_finite_and_bounded(model: type[BaseModel], base: dict[str, Any], field: str,
                                       value: float) -> None:
    """NaN and infinities are refused everywhere (YAML's .nan/.inf), as are negative GB/s and percentages."""
    message = refused(model, {**base, field: value})
    if math.isnan(value) or math.isinf(value) or value < 0:
        assert message is not None
    if message is None:
        assert math.isfinite(value) and value >= 0


@given(steps=st.lists(st.one_of(st.integers(min_value=1, max_value=200),
                                st.integers(min_value=1, max_value=100).map(lambda n: f"{n}%")),
                      min_size=1, max_size=5))
def test_wave_sizes_are_cumulative(steps: list[str | int]) -> None:
    """Steps are cumulative: counts, and percentages, each never shrink; a shrinking list is refused."""
    counts = [s for s in steps if isinstance(s, int)]
    shares = [int(s[:-1]) for s in steps if isinstance(s, str)]
    message = refused(Rollout, {"steps": steps})
    assert (message is None) == (counts == sorted(counts) and shares == sorted(shares)), message


@given(parents=st.dictionaries(st.sampled_from("abcdefg"), st.sampled_from(["root", *"abcdefg"]), min_size=1))
def test_an_account_tree_is_refused_exactly_when_it_has_a_cycle(parents: dict[str, str]) -> None:
    """Random parent maps: a cycle is found iff following parents from some account comes back to it."""
    acct = Accounting.model_validate({"accounts": [{"name": n, "parent": p} for n, p in parents.items()]})

    def loops(start: str) -> bool:
        seen: set[str] = set()
        name = start
        while name in parents and name not in seen:
            seen.add(name)
            name = parents[name]
        return name == start
    cyclic = {n for n in parents if loops(n)}
    problems = list(account_cycles(acct))
    assert bool(problems) == bool(cyclic)
    for path, message in problems:
        named = acct.accounts[int(path[2])].name
        assert named in cyclic and "cycle" in message and f"{named} ->" in message
    assert len(problems) <= len(cyclic)


def test_a_qos_preempting_itself_is_refused() -> None:
    acct = Accounting.model_validate({"qos": [{"name": "high", "preempt": ["low", "high"]}, {"name": "low"}]})
    assert list(qos_self_preemption(acct)) == [(("accounting", "qos", 0, "preempt"),
                                                "QOS 'high' cannot preempt itself")]


@given(duration=st.integers(min_value=1, max_value=700), renew=st.integers(min_value=1, max_value=400))
def test_ha_lease_and_renewal_keep_to_their_bounds_and_relation(duration: int, renew: int) -> None:
    """lease_duration 2s..10m, renew_interval 1s..5m and at most half the lease."""
    message = refused(HAConfig, {"lease_duration": duration, "renew_interval": renew})
    ok = 2 <= duration <= 600 and renew <= 300 and 2 * renew <= duration
    assert (message is None) == ok, message


def test_retry_initial_above_max_is_refused() -> None:
    message = refused(RetryPolicy, {"initial": "1h", "max": "5m"})
    assert message is not None and "must not exceed max" in message


def test_daemon_config_intervals_are_bounded(tmp_path: Path) -> None:
    """A zero poll interval (a busy loop) and a drain timeout of years are refused."""
    for field, value in (("poll_interval", "0s"), ("drain_timeout", "400d"), ("ssh_idle_timeout", "-1")):
        message = refused(DaemonConfig, {"watch": str(tmp_path), field: value})
        assert message is not None and field in message, (field, message)


def _copy(tmp_path: Path) -> Path:
    import shutil
    target = tmp_path / "state"
    shutil.copytree(EXAMPLE, target)
    return target


def test_refusals_name_file_line_and_reason(tmp_path: Path) -> None:
    """Through the loader: a soak of 40 days and a cyclic account tree are each refused at their file:line with
    the reason."""
    state = _copy(tmp_path)
    rollout = (state / "rollout.yaml").read_text()
    (state / "rollout.yaml").write_text(rollout.replace("soak: 30s", "soak: 40d"))
    (state / "accounting.yaml").write_text(
        "accounting:\n  accounts:\n    - name: a\n      parent: b\n    - name: b\n      parent: a\n")
    with pytest.raises(DesiredStateError) as info:
        load_dir(state)
    errors = [str(e) for e in info.value.errors]
    soak_line = rollout.splitlines().index("  soak: 30s") + 1
    assert any(e.startswith(f"rollout.yaml:{soak_line}:") and "rollout.soak" in e and "at most 1d" in e
               for e in errors), errors
    assert any(e.startswith("accounting.yaml:4:") and "accounting.accounts[0].parent" in e
               and "cycle: a -> b -> a" in e for e in errors), errors


def test_gates_that_could_never_run_are_refused() -> None:
    """An NCCL gate without NCCL checks, a smoke image without the smoke job: refused, not passed silently."""
    state = load_dir(EXAMPLE).state
    assert list(rollout_gates(state)) == []
    bare = state.model_copy(update={
        "checks": state.checks.model_copy(update={"nccl": []}),
        "rollout": Rollout.model_validate({"gates": {"nccl": True, "smoke_job": False, "smoke_image": "img"}})})
    found = dict(rollout_gates(bare))
    assert set(found) == {("rollout", "gates", "nccl"), ("rollout", "gates", "smoke_image")}
