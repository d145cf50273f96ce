"""Parser for nccl-tests output: the text table of every layout in use, and the JSON written with -J.

Text layouts handled (the table header line names the columns, so the parser follows it):

* pre-2.13: ``size count type [redop] [root] time algbw busbw error ...`` where ``error`` is the
  largest deviation (a float, or ``N/A`` with ``-c 0``); ``redop``/``root`` appear only for the
  collectives that have them, and the ``Rank`` lines have no ``Group``;
* 2.13+: ``size count type redop root time algbw busbw #wrong ...`` (``N/A`` when checking is off,
  ``none`` as redop for collectives without a reduction);
* the current one, with the optional per-iteration columns of ``-I 1`` (``i_min i_max i_p99 i_cv%``
  after each ``#wrong``), the ``timestamp`` of ``-S 1`` at the end of each row, ``cputime`` instead
  of ``time`` with ``-C 1``, and the ``#bitdiff`` column of the bitwise check.

NCCL_DEBUG lines may be interleaved with the table, even glued to a row that is continued on a later
line; launcher prefixes (``srun --label``'s ``0: ``, Open MPI's ``[1,0]<stdout>:``) are removed.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.checks.nccl.models import Layout, NcclDevice, NcclRow, NcclRun, NcclTest

MODERN_COLUMNS = [
    "size", "count", "type", "redop", "root",
    "time", "algbw", "busbw", "#wrong",
    "time", "algbw", "busbw", "#wrong",
]  # fmt: skip
_TIME_COLUMNS = {"time", "cputime"}
_INT_PREFIX = {"size", "count", "root"}

_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")
_DEBUG_LINE = re.compile(r"^\s*\S+:\d+:\d+ \[\d+\] NCCL (?P<level>[A-Z]+)\b(?P<msg>.*)$")
_GLUED_DEBUG = re.compile(
    r"^(?P<row>\s*[-\d].*?)(?P<dbg>[A-Za-z][\w.\-]*:\d+:\d+ \[\d+\] NCCL (?P<level>[A-Z]+)\b.*)$"
)
_VERSION = re.compile(r"^#\s*nccl-tests version (?P<ver>\S+)(?:.*?nccl-library=(?P<lib>\d+))?")
_OWN_TOOL = re.compile(
    r"^#\s*(?P<tool>checks\.allreduce_bench)\b[^:]*:\s*(?P<versions>.*?)(?:,\s*\d+ ranks)?\s*$"
)
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<binary>\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:")
_NTHREAD = re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+(?P<ngpus>\d+)(?:.*?validation:\s*(?P<validation>\d+))?")
_RANK = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\S+)(?:\s+\[(?P<bus>[^\]]*)\])?\s*(?P<name>.*)$"
)
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)")
_BITWISE = re.compile(r"^#\s*Bitwise mismatches\s*:\s*(?P<n>\d+)")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)\s*(?P<status>OK|FAILED)?")
_ERROR_COMMENT = re.compile(r"^#\s*error:\s*(?P<msg>.+)$")
_TIMESTAMP = re.compile(r"\s+(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\s*$")
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s")
_EXIT_LINE = re.compile(r"^(?:rc|exit(?:[ _]?(?:code|status))?)\s*[=:]\s*(?P<rc>-?\d+)\s*$", re.IGNORECASE)
_BINARY_HINT = re.compile(r"\b(?P<binary>[a-z][a-z0-9_]*_perf)(?:_\w+)?\b")
_FAILURES = [
    re.compile(r"Test (?:(?:NCCL|CUDA) )?failure\b"),
    re.compile(r"Test timeout \(\d+s\)"),
    re.compile(r"^Invalid number of GPUs"),
    re.compile(r"^(?:srun|slurmstepd|mpirun|prterun|orterun):.*\berror\b", re.IGNORECASE),
    re.compile(r"^terminate called after throwing"),
    re.compile(r"error while loading shared libraries|: command not found$|: No such file or directory$"),
    re.compile(r"(?:Segmentation fault|Bus error|Aborted)(?: \(core dumped\))?\s*$"),
]


def collective_from_binary(binary: str) -> str:
    """Collective name of an nccl-tests program: './build/all_reduce_perf_mpi' -> 'all_reduce'."""
    base = binary.rstrip("/").rsplit("/", 1)[-1]
    match = re.match(r"^(?P<name>.+?)_perf(?:_.*)?$", base)
    return match.group("name") if match else base


def layout_of(columns: list[str]) -> Layout:
    """Layout named by a table's columns: 'error' before 2.13, '#wrong' from 2.13 on."""
    if "#wrong" in columns:
        return "2.13+"
    if "error" in columns:
        return "pre-2.13"
    return "unknown"


@dataclass(frozen=True)
class _Columns:
    """Column names of one table: the fixed prefix and the out-of-place and in-place halves."""

    prefix: list[str]
    oop: list[str]
    ip: list[str]

    @property
    def names(self) -> list[str]:
        """All column names in order."""
        return [*self.prefix, *self.oop, *self.ip]


def _columns_from(names: list[str]) -> _Columns | None:
    """Split header names at the two time columns; None when the header is not a results table."""
    names = [n for n in names if n != "timestamp"]
    times = [i for i, name in enumerate(names) if name in _TIME_COLUMNS]
    if len(times) != 2 or names[:1] != ["size"]:
        return None
    return _Columns(prefix=names[: times[0]], oop=names[times[0] : times[1]], ip=names[times[1] :])


_DEFAULT_COLUMNS = _columns_from(MODERN_COLUMNS)


def _number(token: str) -> float | None:
    """A printed number, or None for N/A; raises ValueError for anything else."""
    if token.upper() == "N/A":
        return None
    return float(token)


def _prefix_values(columns: _Columns, tokens: list[str]) -> dict[str, Any] | None:
    """Values of the size/count/type/redop/root columns; None when the tokens do not fit."""
    values: dict[str, Any] = {}
    for name, token in zip(columns.prefix, tokens, strict=True):
        if name in _INT_PREFIX:
            if not re.fullmatch(r"-?\d+", token):
                return None
            values[name] = int(token)
        else:
            values[name] = token
    return values


def _half_values(half: str, names: list[str], tokens: list[str]) -> dict[str, Any]:
    """Values of one placement's columns (time, algbw, busbw, #wrong or error, optional extras)."""
    values: dict[str, Any] = {}
    extra: dict[str, float] = {}
    for name, token in zip(names, tokens, strict=True):
        number = _number(token)
        if name in _TIME_COLUMNS:
            values[f"{half}_time_us"] = number
        elif name in ("algbw", "busbw"):
            values[f"{half}_{name}"] = number
        elif name == "#wrong":
            values[f"{half}_wrong"] = None if number is None else int(number)
        elif name == "error":
            values[f"{half}_error"] = number
        elif number is not None:
            extra[f"{half}_{name}"] = number
    values["extra"] = extra
    return values


def parse_row(columns: _Columns, line: str) -> NcclRow | None:
    """One results row under the given columns; None when the line is not such a row."""
    timestamp = _TIMESTAMP.search(line)
    text = line[: timestamp.start()] if timestamp else line
    tokens = text.split()
    np_, no = len(columns.prefix), len(columns.oop)
    if len(tokens) != len(columns.names):
        return None
    try:
        prefix = _prefix_values(columns, tokens[:np_])
        if prefix is None:
            return None
        oop = _half_values("oop", columns.oop, tokens[np_ : np_ + no])
        ip = _half_values("ip", columns.ip, tokens[np_ + no :])
    except ValueError:
        return None
    extra = {**oop.pop("extra"), **ip.pop("extra")}
    return NcclRow(**prefix, **oop, **ip, extra=extra, timestamp=timestamp.group("ts") if timestamp else None)


@dataclass
class _TestState:
    """What has been read of the test being parsed."""

    binary: str | None = None
    tool: str | None = None
    nccl_version: int | None = None
    ngpus: int | None = None
    validation: bool | None = None
    seen_nthread: bool = False
    columns: _Columns | None = None
    time_kind: str = "time"
    devices: list[NcclDevice] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    out_of_bounds: int | None = None
    bitwise: int | None = None
    avg_busbw: float | None = None
    avg_ok: bool | None = None
    concluded: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def has_footer(self) -> bool:
        """True once the out-of-bounds or average line was read."""
        return self.out_of_bounds is not None or self.avg_busbw is not None

    @property
    def used(self) -> bool:
        """True once anything beyond the version line belongs to this test."""
        return bool(self.binary or self.seen_nthread or self.columns or self.rows or self.has_footer)


def _closing_errors(state: _TestState) -> list[str]:
    """Errors known only once a test is complete: a cut row, a missing footer, no rows at all.

    Wrong values, out-of-bounds counts and a failed -a check are results, not errors: the verdict
    (checks.nccl.verdict) judges them.
    """
    errors = list(state.errors)
    if state.pending:
        errors.append(f"truncated row: {' '.join(state.pending)}")
    if (state.columns or state.rows) and not state.has_footer:
        last = f" (last size {state.rows[-1].size})" if state.rows else ""
        errors.append(f"truncated output: no footer after {len(state.rows)} rows{last}")
    elif not state.rows and not state.errors:
        errors.append("no result rows")
    return errors


def _finish(state: _TestState, default_collective: str) -> NcclTest:
    """Turn a test state into the result model."""
    columns = state.columns.names if state.columns else []
    return NcclTest(
        collective=collective_from_binary(state.binary) if state.binary else default_collective,
        binary=state.binary,
        tool=state.tool,
        nccl_version=state.nccl_version,
        layout=layout_of(columns),
        time_kind="cputime" if state.time_kind == "cputime" else "time",
        ngpus=state.ngpus,
        validation=state.validation,
        devices=state.devices,
        columns=columns,
        rows=state.rows,
        out_of_bounds=state.out_of_bounds,
        bitwise_mismatches=state.bitwise,
        avg_busbw=state.avg_busbw,
        avg_busbw_ok=state.avg_ok,
        concluded=state.concluded,
        errors=_closing_errors(state),
    )


class _TextParser:
    """Line-by-line reader of nccl-tests text output."""

    def __init__(self, default_collective: str) -> None:
        self.default_collective = default_collective
        self.tests: list[NcclTest] = []
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.exit_code: int | None = None
        self.current: _TestState | None = None
        self.pending_tool: tuple[str, int | None] | None = None
        self.hint: str | None = None

    # -- test bookkeeping -------------------------------------------------------------------------

    def close(self) -> None:
        """Finish the current test, if any."""
        if self.current is not None:
            self.tests.append(_finish(self.current, self.default_collective))
            self.current = None

    def open(self) -> _TestState:
        """Start a new test, taking the pending version line and the binary hint."""
        self.close()
        state = _TestState(binary=self.hint)
        if self.pending_tool:
            state.tool, state.nccl_version = self.pending_tool
        self.pending_tool, self.hint = None, None
        self.current = state
        return state

    def state(self) -> _TestState:
        """The current test, started if there is none."""
        return self.current if self.current is not None else self.open()

    def add_error(self, message: str) -> None:
        """Record an error on the current test, or at the top level when no test is open."""
        (self.current.errors if self.current is not None else self.errors).append(message)

    # -- lines ------------------------------------------------------------------------------------

    def feed(self, raw: str) -> None:
        """Read one line of output."""
        line = self.strip_debug(_LAUNCHER_PREFIX.sub("", raw.rstrip("\r\n"), count=1).rstrip())
        if line is None or not line.strip():
            return
        if self.failure(line) or self.exit_line(line):
            return
        if line.lstrip().startswith("#"):
            self.comment(line.strip())
        elif self.current is not None and self.current.pending:
            self.continue_row(line)
        elif _ROW_START.match(line):
            self.row(line)
        else:
            self.take_hint(line)

    def strip_debug(self, line: str) -> str | None:
        """Drop NCCL_DEBUG output (keeping WARN lines as warnings); None for a whole debug line."""
        whole = _DEBUG_LINE.match(line)
        if whole:
            if whole.group("level") == "WARN":
                self.warnings.append(line.strip())
            return None
        glued = _GLUED_DEBUG.match(line)
        if glued:
            if glued.group("level") == "WARN":
                self.warnings.append(glued.group("dbg").strip())
            return glued.group("row")
        return line

    def failure(self, line: str) -> bool:
        """Record a failure message; True when the line was one."""
        if not any(pattern.search(line.strip()) for pattern in _FAILURES):
            return False
        self.add_error(line.strip().lstrip(". ").strip())
        return True

    def exit_line(self, line: str) -> bool:
        """Read a recorded exit status such as 'rc=5'; True when the line was one."""
        match = _EXIT_LINE.match(line.strip())
        if match and self.exit_code is None:
            self.exit_code = int(match.group("rc"))
        return match is not None

    def take_hint(self, line: str) -> None:
        """Remember a program name (e.g. an echoed command line) for a test that does not name itself."""
        match = _BINARY_HINT.search(line)
        if match:
            self.hint = match.group("binary")

    def comment(self, line: str) -> None:
        """Read one '#' line: version, test start and end, devices, column header, footer."""
        if self.current is not None and self.current.pending:
            self.current.errors.append(f"truncated row: {' '.join(self.current.pending)}")
            self.current.pending = []
        for handler in (
            self.version, self.starting, self.nthread, self.rank, self.header, self.footer, self.concluded,
        ):  # fmt: skip
            if handler(line):
                return
        self.take_hint(line)

    def version(self, line: str) -> bool:
        """'# nccl-tests version ...' (or this project's fallback benchmark) opens a new test."""
        match = _VERSION.match(line)
        own = _OWN_TOOL.match(line)
        if not match and not own:
            return False
        if self.current is not None and self.current.used:
            self.close()
        if match:
            library = match.group("lib")
            self.pending_tool = (f"nccl-tests {match.group('ver')}", int(library) if library else None)
        else:
            self.pending_tool = (f"{own.group('tool')} ({own.group('versions')})" if own else "", None)
        return True

    def starting(self, line: str) -> bool:
        """'# Collective test starting: NAME'."""
        match = _STARTING.match(line)
        if not match:
            return False
        state = self.open() if self.current is None or self.current.used else self.current
        if self.pending_tool:
            state.tool, state.nccl_version = self.pending_tool
            self.pending_tool = None
        state.binary = match.group("binary")
        return True

    def nthread(self, line: str) -> bool:
        """'# nThread 1 nGpus 2 ...': the first line of a test in the layouts before 2.13."""
        match = _NTHREAD.match(line)
        if not match:
            return False
        current = self.current
        reuse = current is not None and not current.seen_nthread and not current.columns
        state = current if reuse and current is not None else self.open()
        state.seen_nthread = True
        state.ngpus = int(match.group("ngpus"))
        if match.group("validation") is not None:
            state.validation = match.group("validation") != "0"
        return True

    def rank(self, line: str) -> bool:
        """'#  Rank  0 Group  0 Pid 1329 on vm device  0 [0000:00:06] NVIDIA H200'."""
        match = _RANK.match(line)
        if not match:
            return False
        group = match.group("group")
        self.state().devices.append(
            NcclDevice(
                rank=int(match.group("rank")),
                group=int(group) if group is not None else None,
                pid=int(match.group("pid")),
                host=match.group("host"),
                device=match.group("device"),
                bus_id=match.group("bus"),
                name=match.group("name").strip() or None,
            )
        )
        return True

    def header(self, line: str) -> bool:
        """The column-name line of the results table; the units and group lines are skipped."""
        names = line.lstrip("#").split()
        if "(B)" in names or "out-of-place" in line:
            return True
        columns = _columns_from(names)
        if columns is None:
            return False
        state = self.state()
        if state.columns is not None and (state.rows or state.has_footer):
            state = self.open()
        state.columns = columns
        state.time_kind = "cputime" if "cputime" in names else "time"
        return True

    def footer(self, line: str) -> bool:
        """'# Out of bounds values', '# Bitwise mismatches', '# Avg bus bandwidth' and '# error:'."""
        if match := _OUT_OF_BOUNDS.match(line):
            self.state().out_of_bounds = int(match.group("n"))
        elif match := _BITWISE.match(line):
            self.state().bitwise = int(match.group("n"))
        elif match := _AVG_BUSBW.match(line):
            self.average(match)
        elif match := _ERROR_COMMENT.match(line):
            self.add_error(match.group("msg").strip())
        else:
            return False
        return True

    def average(self, match: re.Match[str]) -> None:
        """Store the average bus bandwidth and its -a check result."""
        state = self.state()
        try:
            value = float(match.group("bw"))
        except ValueError:
            state.errors.append(f"unreadable average bus bandwidth: {match.group('bw')}")
            return
        state.avg_busbw = value if math.isfinite(value) else None
        status = match.group("status")
        state.avg_ok = None if status is None else status == "OK"

    def concluded(self, line: str) -> bool:
        """'# Collective test concluded: NAME' closes the test."""
        if not _CONCLUDED.match(line):
            return False
        self.state().concluded = True
        self.close()
        return True

    def row(self, line: str) -> None:
        """A results row, or the start of one continued on a later line."""
        state = self.state()
        columns = state.columns or _DEFAULT_COLUMNS
        assert columns is not None
        parsed = parse_row(columns, line)
        if parsed is not None:
            state.rows.append(parsed)
        elif len(line.split()) < len(columns.names):
            state.pending = line.split()
        else:
            state.errors.append(f"unparsable row: {line.strip()}")

    def continue_row(self, line: str) -> None:
        """Join a row split by interleaved debug output."""
        state = self.state()
        columns = state.columns or _DEFAULT_COLUMNS
        assert columns is not None
        pending, state.pending = state.pending, []
        if _ROW_START.match(line) and parse_row(columns, line) is not None:
            state.errors.append(f"truncated row: {' '.join(pending)}")
            self.row(line)
        else:
            self.row(" ".join([*pending, line.strip()]))

    def result(self, exit_code: int | None) -> NcclRun:
        """Close the last test and collect the run."""
        self.close()
        code = exit_code if exit_code is not None else self.exit_code
        errors = list(self.errors)
        if code:
            errors.append(f"exit code {code}")
        if not self.tests and not errors:
            errors.append("no nccl-tests output found")
        return NcclRun(source="text", tests=self.tests, errors=errors, warnings=self.warnings, exit_code=code)


def parse_text(text: str, *, exit_code: int | None = None, collective: str | None = None) -> NcclRun:
    """Parse nccl-tests text output (any layout, one or several tests)."""
    parser = _TextParser(default_collective=collective or "unknown")
    for line in text.splitlines():
        parser.feed(line)
    return parser.result(exit_code)


# -- JSON (-J) ------------------------------------------------------------------------------------


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


def parse_output(text: str, *, exit_code: int | None = None, collective: str | None = None) -> NcclRun:
    """Parse a saved output, text or JSON, telling them apart by the first character."""
    if text.lstrip().startswith("{"):
        return parse_json(text, exit_code=exit_code, collective=collective)
    return parse_text(text, exit_code=exit_code, collective=collective)


def parse_file(path: str | Path, *, exit_code: int | None = None, collective: str | None = None) -> NcclRun:
    """Parse a saved output file, text or JSON."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return parse_output(text, exit_code=exit_code, collective=collective)
