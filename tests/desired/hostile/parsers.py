"""Independent readers of the rendered files, written from the formats' own rules (not from our renderers).

- Slurm (slurm.conf, gres.conf, cgroup.conf): src/common/parse_config.c: a line ending in an odd number of
  `\\` continues; `#` after an even number of `\\` starts a comment; then every `\\` escapes the next
  character; then `Key=Value` pairs by the regex `([[:alnum:]]+)=("([^"]*)"|([^[:space:]]+))`.
- fstab (libmount): blank-separated fields, `\\ooo` octal escapes.
- exports (nfs-utils): a path token (octal escapes), then `client(options)` tokens.
"""

from __future__ import annotations

import re

_PAIR = re.compile(r'\s*([A-Za-z0-9]+)\s*=\s*(?:"([^"]*)"|([^\s]+))(?=\s|$)')
_OCTAL = re.compile(r"\\([0-7]{3})")


def _strip_comment(line: str) -> str:
    slashes = 0
    for i, ch in enumerate(line):
        if ch == "#" and slashes % 2 == 0:
            return line[:i]
        slashes = slashes + 1 if ch == "\\" else 0
    return line


def _strip_escapes(line: str) -> str:
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\":
            i += 1
            if i >= len(line):
                break
        out.append(line[i])
        i += 1
    return "".join(out)


def slurm_lines(text: str) -> list[list[tuple[str, str]]]:
    """Each logical line of a Slurm config file as its (key, value) pairs; ValueError on what Slurm refuses."""
    logical: list[str] = []
    pending = ""
    for raw in text.split("\n"):
        line = pending + _strip_comment(raw)
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = ""
        logical.append(_strip_escapes(line))
    out = []
    for line in logical:
        if not line.strip():
            continue
        pairs, pos = [], 0
        while pos < len(line):
            if not line[pos:].strip():
                break
            match = _PAIR.match(line, pos)
            if not match:
                raise ValueError(f"Slurm would not parse {line[pos:]!r}")
            value = match.group(2) if match.group(2) is not None else match.group(3)
            pairs.append((match.group(1), value))
            pos = match.end()
        out.append(pairs)
    return out


def unescape_octal(text: str) -> str:
    """Decode `\\ooo` escapes."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def block_lines(text: str) -> list[str]:
    """The lines between the managed-block markers."""
    lines = text.split("\n")
    begin = lines.index("# BEGIN reconciler managed")
    end = lines.index("# END reconciler managed")
    return lines[begin + 1:end]


def fstab_entries(text: str) -> list[tuple[str, str, str, list[str], int, int]]:
    """(source, mountpoint, type, options, dump, passno) per fstab line of the managed block."""
    out = []
    for line in block_lines(text):
        fields = line.split()
        if len(fields) != 6:
            raise ValueError(f"fstab line with {len(fields)} fields: {line!r}")
        out.append((unescape_octal(fields[0]), unescape_octal(fields[1]), fields[2], fields[3].split(","),
                    int(fields[4]), int(fields[5])))
    return out


def exports_entries(text: str) -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """(path, [(client, options)]) per exports line of the managed block."""
    out = []
    for line in block_lines(text):
        path, _, rest = line.partition(" ")
        clients = []
        for token in rest.split(" "):
            match = re.fullmatch(r"([^()\s]+)\(([^()\s]*)\)", token)
            if not match:
                raise ValueError(f"not a client(options) token: {token!r} in {line!r}")
            clients.append((match.group(1), match.group(2).split(",")))
        out.append((unescape_octal(path), clients))
    return out
