"""DCGM diagnostics: `dcgmi diag -r LEVEL`, its table of tests read as Pass / Fail / Warn / Skip."""

from __future__ import annotations

import re
from dataclasses import dataclass

DCGM_MISSING = 127
_ROW = re.compile(r"^\|\s*(?P<name>[^|]*?)\s*\|\s*(?P<result>Pass|Fail|Warn|Skip)\b(?P<rest>[^|]*)\|?\s*$",
                  re.IGNORECASE)


def dcgm_command(level: int, timeout: int) -> str:
    """Shell text running DCGM's diagnostic at LEVEL; 127 when dcgmi is not installed."""
    return (f"if command -v dcgmi >/dev/null 2>&1; then timeout -k 10 {timeout} dcgmi diag -r {int(level)}; "
            f"else echo 'dcgmi: command not found'; (exit {DCGM_MISSING}); fi")


@dataclass(frozen=True)
class DcgmTest:
    """One row of the diagnostic's table: the test, Pass/Fail/Warn/Skip, what follows (e.g. `- GPU: 0`)."""

    name: str
    result: str
    detail: str


def parse_diag(output: str) -> list[DcgmTest]:
    """The tests of `dcgmi diag`'s table; a test's continuation rows add to its detail."""
    tests: list[DcgmTest] = []
    for raw in output.splitlines():
        found = _ROW.match(raw.strip())
        if found is None:
            continue
        name = found.group("name").strip() or (tests[-1].name if tests else "?")
        tests.append(DcgmTest(name, found.group("result").capitalize(), found.group("rest").strip(" -")))
    return tests
