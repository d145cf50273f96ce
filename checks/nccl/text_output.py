"""Parser for nccl-tests text output: the table of every layout in use, one or several tests per output.

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

import math
import re

from reconciler.checks.nccl.binary import BINARY_HINT
from reconciler.checks.nccl.models import NcclDevice, NcclRun, NcclTest
from reconciler.checks.nccl.table import DEFAULT_COLUMNS, columns_from, parse_row
from reconciler.checks.nccl.text_test import PartialTest, finish_test

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
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s")
_EXIT_LINE = re.compile(r"^(?:rc|exit(?:[ _]?(?:code|status))?)\s*[=:]\s*(?P<rc>-?\d+)\s*$", re.IGNORECASE)
_FAILURES = [
    re.compile(r"Test (?:(?:NCCL|CUDA) )?failure\b"),
    re.compile(r"Test timeout \(\d+s\)"),
    re.compile(r"^Invalid number of GPUs"),
    re.compile(r"^(?:srun|slurmstepd|mpirun|prterun|orterun):.*\berror\b", re.IGNORECASE),
    re.compile(r"^terminate called after throwing"),
    re.compile(r"error while loading shared libraries|: command not found$|: No such file or directory$"),
    re.compile(r"(?:Segmentation fault|Bus error|Aborted)(?: \(core dumped\))?\s*$"),
]


class _TextParser:
    """Line-by-line reader of nccl-tests text output."""

    def __init__(self, default_collective: str) -> None:
        self.default_collective = default_collective
        self.tests: list[NcclTest] = []
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.exit_code: int | None = None
        self.current: PartialTest | None = None
        self.pending_tool: tuple[str, int | None] | None = None
        self.hint: str | None = None

    # -- test bookkeeping -------------------------------------------------------------------------

    def close(self) -> None:
        """Finish the current test, if any."""
        if self.current is not None:
            self.tests.append(finish_test(self.current, self.default_collective))
            self.current = None

    def open(self) -> PartialTest:
        """Start a new test, taking the pending version line and the binary hint."""
        self.close()
        state = PartialTest(binary=self.hint)
        if self.pending_tool:
            state.tool, state.nccl_version = self.pending_tool
        self.pending_tool, self.hint = None, None
        self.current = state
        return state

    def state(self) -> PartialTest:
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
        match = BINARY_HINT.search(line)
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
        columns = columns_from(names)
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
        columns = state.columns or DEFAULT_COLUMNS
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
        columns = state.columns or DEFAULT_COLUMNS
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
