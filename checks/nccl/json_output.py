"""Parser for the JSON document nccl-tests writes with -J FILE (one test per document)."""

from __future__ import annotations

import json
import re
from typing import Any

from reconciler.checks.nccl.binary import collective_from_binary
from reconciler.checks.nccl.models import NcclDevice, NcclRow, NcclRun, NcclTest


def _json_half(half: str, data: dict[str, Any] | None) -> dict[str, Any]:
    """Row fields of one placement of a JSON result."""
    if not data:
        return {}
    wrong = data.get("nwrong")
    return {
        f"{half}_time_us": data.get("time", data.get("cpu_time")),
        f"{half}_algbw": data.get("alg_bw"),
        f"{half}_busbw": data.get("bus_bw"),
        f"{half}_wrong": None if wrong is None else int(wrong),
    }


def _json_extra(result: dict[str, Any]) -> dict[str, float]:
    """Per-iteration statistics of a JSON result (-I 1), named like the text columns."""
    extra: dict[str, float] = {}
    names = {"min_us": "i_min", "max_us": "i_max", "p99_us": "i_p99", "cv_pct": "i_cv%"}
    for half, key in (("oop", "out_of_place_per_iter"), ("ip", "in_place_per_iter")):
        stats = result.get(key) or {}
        extra.update({f"{half}_{names[k]}": float(v) for k, v in stats.items() if k in names})
    return extra


def _json_row(result: dict[str, Any]) -> NcclRow:
    """One entry of the JSON 'results' list."""
    root = str(result.get("root", "")).strip()
    return NcclRow(
        size=int(result["size"]),
        count=int(result["count"]),
        type=str(result.get("type", "")),
        redop=result.get("redop"),
        root=int(root) if re.fullmatch(r"-?\d+", root) else None,
        **_json_half("oop", result.get("out_of_place")),
        **_json_half("ip", result.get("in_place")),
        extra=_json_extra(result),
    )


def _json_okay(value: Any) -> bool | None:
    """JSON 'okay' field: 'true'/'false' strings or booleans; None for 'unchecked'."""
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(str(value).lower())


def _json_devices(config: dict[str, Any]) -> list[NcclDevice]:
    """The config's device list."""
    return [
        NcclDevice(
            rank=int(d.get("rank", i)),
            group=d.get("group"),
            pid=d.get("pid"),
            host=str(d.get("hostname", "")),
            device=str(d.get("device", "")),
            bus_id=d.get("device_hex"),
            name=d.get("device_info"),
        )
        for i, d in enumerate(config.get("devices") or [])
    ]


def _json_test(doc: dict[str, Any], default_collective: str) -> NcclTest:
    """The one test described by a -J JSON document."""
    args = doc.get("args") or []
    binary = str(args[0]).rsplit("/", 1)[-1] if args else None
    config = doc.get("config") or {}
    results = doc.get("results")
    bounds = doc.get("out_of_bounds") or {}
    average = doc.get("average_bus_bandwidth") or {}
    errors = [str(e) for e in doc.get("errors") or [] if str(e).strip()]
    if not results:
        errors.append("no result rows")
    validation = config.get("validation")
    return NcclTest(
        collective=collective_from_binary(binary) if binary else default_collective,
        binary=binary,
        tool=f"nccl-tests (JSON v{doc.get('version')})",
        nccl_version=doc.get("nccl_version"),
        layout="json",
        time_kind="cputime"
        if any("cpu_time" in (r.get("in_place") or {}) for r in results or [])
        else "time",
        ngpus=config.get("ngpus"),
        validation=None if validation is None else bool(validation),
        devices=_json_devices(config),
        rows=[_json_row(r) for r in results or []],
        out_of_bounds=bounds.get("count"),
        avg_busbw=average.get("bandwidth"),
        avg_busbw_ok=_json_okay(average.get("okay")),
        concluded="end_time" in doc,
        errors=errors,
    )


def parse_json(
    data: str | dict[str, Any], *, exit_code: int | None = None, collective: str | None = None
) -> NcclRun:
    """Parse the JSON document nccl-tests writes with -J FILE."""
    errors: list[str] = []
    tests: list[NcclTest] = []
    try:
        doc = json.loads(data) if isinstance(data, str) else data
        if not isinstance(doc, dict):
            raise ValueError("top level is not an object")
        tests.append(_json_test(doc, collective or "unknown"))
    except (ValueError, KeyError, TypeError) as exc:
        errors.append(f"invalid nccl-tests JSON: {exc}")
    if exit_code:
        errors.append(f"exit code {exit_code}")
    return NcclRun(source="json", tests=tests, errors=errors, exit_code=exit_code)
