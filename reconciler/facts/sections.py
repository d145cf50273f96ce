"""Several probes in one remote command: each prints its output between markers, with its exit status."""

from __future__ import annotations

import re
from dataclasses import dataclass

MARK = "@@reconciler"
_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")
_BEGIN = re.compile(rf"^{MARK}-begin (?P<name>\S+)\s*$")
_END = re.compile(rf"^(?P<pre>.*){MARK}-end (?P<name>\S+) (?P<rc>-?\d+)\s*$")


@dataclass(frozen=True)
class Section:
    """What one probe printed (stdout and stderr together) and its exit status; rc None when cut off."""

    name: str
    output: str
    rc: int | None

    @property
    def lines(self) -> list[str]:
        """Non-empty output lines, stripped."""
        return [line.strip() for line in self.output.splitlines() if line.strip()]


def section(name: str, command: str) -> str:
    """Shell text running COMMAND between the markers of section NAME (stderr joined to stdout)."""
    if not _NAME.match(name):
        raise ValueError(f"bad section name {name!r}")
    return f"echo '{MARK}-begin {name}'; {{ {command}\n}} 2>&1; echo \"{MARK}-end {name} $?\""


def script(parts: list[tuple[str, str]]) -> str:
    """One shell script running every (name, command) in order, each in its own section."""
    return "\n".join(section(name, command) for name, command in parts) + "\n"


def split_sections(text: str) -> dict[str, Section]:
    """Cut an output into its sections; a section without its end marker gets rc None."""
    found: dict[str, Section] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        begin = _BEGIN.match(line)
        end = _END.match(line)
        if begin:
            if name is not None:
                found[name] = Section(name, "\n".join(lines), None)
            name, lines = begin.group("name"), []
        elif end and name is not None and end.group("name") == name:
            if end.group("pre"):
                lines.append(end.group("pre"))
            found[name] = Section(name, "\n".join(lines) + ("\n" if lines else ""), int(end.group("rc")))
            name, lines = None, []
        elif name is not None:
            lines.append(line)
    if name is not None:
        found[name] = Section(name, "\n".join(lines), None)
    return found
