"""Reading a Slurm configuration file as Slurm does, for the round-trip oracle (tests/slurm_meaning.py).

Logical lines (comments cut, continuations joined, escapes removed), Include spliced in where it stands, key=value
pairs, and the value helpers every file's meaning shares. tests/slurm_meaning.py says what is followed and why.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import hostlist

Texts = Mapping[str, str]
Source = str | Path | Texts

KEYVALUE = re.compile(r'\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
_INCLUDE = re.compile(r"include\s", re.IGNORECASE)
BOOL_TRUE = {"yes", "up", "true", "1"}
BOOL_FALSE = {"no", "down", "false", "0"}


class SlurmConfError(ValueError):
    """A configuration text Slurm would reject; the message starts with ``file:line:``."""


@dataclass(frozen=True)
class Line:
    """One logical line (continuations joined, comment cut, escapes removed)."""

    file: str
    number: int
    text: str


def _strip_comment(raw: str) -> str:
    backslashes = 0
    for i, ch in enumerate(raw):
        if ch == "#" and backslashes % 2 == 0:
            return raw[:i]
        backslashes = backslashes + 1 if ch == "\\" else 0
    return raw


def _continues(text: str) -> tuple[str, bool]:
    body = text.rstrip()
    count = len(body) - len(body.rstrip("\\"))
    if count % 2 == 1:
        return body[:-1], True
    return text, False


def _unescape(text: str) -> str:
    return re.sub(r"\\(.?)", r"\1", text)


def logical_lines(text: str, file: str) -> Iterator[Line]:
    """The logical lines of one file's text, as Slurm's _get_next_line builds them."""
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        piece, more = _continues(_strip_comment(raw))
        pending += piece
        if more:
            continue
        yield Line(file, start, _unescape(pending))
        pending = ""
    if pending:
        yield Line(file, start, _unescape(pending))


class ConfReader:
    """Reads a config file and its includes from a directory or from a dict of texts."""

    def __init__(self, source: Source, main: str) -> None:
        self.texts: Texts | None = None
        if isinstance(source, Mapping):
            self.texts = source
            self.base = Path(".")
            self.main = main
        else:
            path = Path(source)
            self.base, self.main = (path.parent, path.name) if path.is_file() else (path, main)
        self.files: list[str] = []

    def exists(self, name: str) -> bool:
        """True when NAME is among the texts, or a file in the directory."""
        if self.texts is not None:
            return name in self.texts
        return (self.base / name).is_file()

    def read(self, name: str, where: str) -> str:
        """The text of NAME (recorded in `files`); SlurmConfError, naming WHERE, when it cannot be read."""
        self.files.append(name)
        if self.texts is not None:
            if name in self.texts:
                return self.texts[name]
            if Path(name).name in self.texts:
                return self.texts[Path(name).name]
            raise SlurmConfError(f"{where}: included file {name!r} is not among the texts")
        path = Path(name) if Path(name).is_absolute() else self.base / name
        try:
            return path.read_text()
        except OSError as err:
            raise SlurmConfError(f"{where}: cannot read {path}: {err.strerror}") from err

    def lines(self, name: str, cluster: Mapping[str, str | tuple[str, ...]], where: str = "") -> Iterator[Line]:
        """Logical lines of NAME with its includes spliced in where they stand."""
        text = self.read(name, where or name)
        for line in logical_lines(text, name):
            if _INCLUDE.match(line.text):
                target = line.text.split()[1] if len(line.text.split()) > 1 else ""
                if not target:
                    raise SlurmConfError(f"{line.file}:{line.number}: Include without a file name")
                if "%c" in target:
                    cname = cluster.get("clustername")
                    if not isinstance(cname, str):
                        raise SlurmConfError(f"{line.file}:{line.number}: %c in Include before ClusterName")
                    target = target.replace("%c", cname.lower())
                if not Path(target).is_absolute():
                    target = str(Path(name).parent / target) if Path(name).parent != Path(".") else target
                yield from self.lines(target, cluster, f"{line.file}:{line.number}")
            else:
                yield line


def line_pairs(line: Line, text: str | None = None) -> list[tuple[str, str]]:
    """Every key=value of TEXT (default: the whole line); anything else left over is an error."""
    rest = line.text if text is None else text
    pairs: list[tuple[str, str]] = []
    while True:
        match = KEYVALUE.match(rest)
        if not match:
            break
        key, op, quoted, bare = match.groups()
        if op:
            raise SlurmConfError(f"{line.file}:{line.number}: operator '{op}=' is not supported here")
        pairs.append((key.lower(), quoted if quoted is not None else bare))
        rest = rest[match.end():]
    if rest.strip():
        raise SlurmConfError(f"{line.file}:{line.number}: cannot parse {rest.strip()!r}")
    return pairs


# ---------------------------------------------------------------- values every file shares


def expand(names: str) -> list[str]:
    """Expand a Slurm hostlist expression (white space counts as a comma)."""
    names = ",".join(names.split())
    return list(hostlist.expand_hostlist(names)) if names else []


def yes_no(value: str) -> str:
    """A boolean as YES or NO; any other value as written."""
    low = value.lower()
    if low in BOOL_TRUE:
        return "YES"
    if low in BOOL_FALSE:
        return "NO"
    return value


def sorted_list(value: str) -> str:
    """A comma-separated list sorted, empty items dropped."""
    return ",".join(sorted(v for v in value.split(",") if v))
