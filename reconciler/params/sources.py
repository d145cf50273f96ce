"""Readers for the generator: parameter names and notes from Slurm's roff man pages, value types from its C parser
tables. Pure text in, plain data out; `generate.py` feeds them the files of each release tag."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# --------------------------------------------------------------------------- man pages

# Section of slurm.conf.5 -> scope of the parameters documented in it. gres.conf.5 and cgroup.conf.5 document
# everything outside these headings; their scope is decided per key by the generator.
SLURM_CONF_SECTIONS = {
    "PARAMETERS": "global",
    "NODE CONFIGURATION": "node",
    "DOWN NODE CONFIGURATION": "downnodes",
    "FRONTEND NODE CONFIGURATION": "frontend",
    "NODESET CONFIGURATION": "nodeset",
    "PARTITION CONFIGURATION": "partition",
}
# Sections of gres.conf.5 / cgroup.conf.5 that hold no parameter definitions.
NON_PARAMETER_SECTIONS = {"NAME", "EXAMPLE", "EXAMPLES", "COPYING", "SEE ALSO", "FILES", "DISTRIBUTION-SPECIFIC NOTES"}

_SECTION = re.compile(r'^\.SH\s+"?([^"]*)"?\s*$')
_TAG_NAME = re.compile(r"^\\fB([A-Za-z][A-Za-z0-9]*)\\f[RPI]")
_FONT = re.compile(r"\\f(?:[BIRP]|\(..|\[[^]]*\])")


@dataclass
class ManEntry:
    """One parameter as a man page documents it."""

    name: str
    section: str
    text: str  # plain text of its own description (roff markup removed), without its values' descriptions
    values: dict[str, str] = field(default_factory=dict)  # value/sub-option -> its description (.RS blocks)


def plain(roff: str) -> str:
    """Roff source to plain text: macros dropped, fonts removed, escapes resolved, whitespace folded."""
    lines = []
    for line in roff.splitlines():
        if line.startswith((".", "'")):
            continue
        line = _FONT.sub("", line)
        line = line.replace("\\-", "-").replace("\\(em", "-").replace("\\(aq", "'").replace("\\e", "\\")
        line = line.replace("\\&", "").replace("\\ ", " ")
        lines.append(line)
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def _tag(lines: list[str], i: int) -> tuple[re.Match[str] | None, int]:
    """The `\\fBName\\fR` tag of the `.TP` at line i, and the index of the tag line."""
    j = i + 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    return (_TAG_NAME.match(lines[j]) if j < len(lines) else None), j


def parse_man(text: str) -> list[ManEntry]:
    """Every parameter a man page defines: a `.TP` at nesting depth 0 whose tag line starts `\\fBName\\fR`.

    `.RS`/`.RE` blocks hold the values or sub-options of a parameter (themselves `.TP` lists): their text is kept
    apart in `values`, so that a note about one sub-option is not read as a note about the whole parameter.
    """
    entries: list[ManEntry] = []
    section = ""
    depth = 0
    own: list[str] = []
    values: dict[str, list[str]] = {}
    value = ""
    current: tuple[str, str] | None = None  # (name, section)
    lines = text.splitlines()

    def close() -> None:
        nonlocal current
        if current is not None:
            entries.append(ManEntry(current[0], current[1], plain("\n".join(own)),
                                    {k: plain("\n".join(v)) for k, v in values.items()}))
            current = None

    i = 0
    while i < len(lines):
        line = lines[i]
        heading = _SECTION.match(line)
        if heading:
            close()
            section = heading.group(1).replace("\\-", "-").strip()
            depth = 0
        elif line.startswith(".RS"):
            depth += 1
        elif line.startswith(".RE"):
            depth = max(0, depth - 1)
            value = "" if depth == 0 else value
        elif re.match(r"^\.TP\b", line):
            tag, j = _tag(lines, i)
            if tag and depth == 0:
                close()
                current, own, values, value = (tag.group(1), section), [], {}, ""
                i = j + 1
                continue
            if current is not None:  # a value or sub-option of the current parameter
                value = plain(lines[j]) if j < len(lines) else ""
                values.setdefault(value, [])
                i = j + 1
                continue
        elif current is not None:
            (values[value] if value else own).append(line)
        i += 1
    close()
    return entries


# --------------------------------------------------------------------------- restart notes

# Sentences of a parameter's description that say a change is not applied by `scontrol reconfigure`, and which
# daemons must restart. Checked in this order; the first pattern that matches a sentence decides it.
_BOTH = (r"(?:the\s+)?slurmctld(?:\s+daemon)?\s+and\s+(?:all\s+)?(?:the\s+)?slurmd(?:\s+daemons?)?")
_NEEDED = r"(?:is|are)\s+(?:required|needed|necessary)"
RESTART_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("restart_all", re.compile(rf"restart(?:ing)? (?:of )?(?:both )?{_BOTH} {_NEEDED}", re.I)),
    ("restart_all", re.compile(rf"requires? (?:a )?restart(?:ing)? (?:of )?(?:both )?{_BOTH}", re.I)),
    ("restart_all", re.compile(r"all slurm daemons (?:must|need to|should) be restarted", re.I)),
    ("restart_all", re.compile(r"slurmctld and (?:the )?slurmd daemons (?:must|need to) be restarted", re.I)),
    ("restart_slurmctld", re.compile(rf"restart of (?:the )?slurmctld(?: daemon)? {_NEEDED}", re.I)),
    ("restart_slurmctld", re.compile(r"requires? (?:a )?restart(?:ing)? (?:of )?(?:the )?slurmctld", re.I)),
    ("restart_slurmctld", re.compile(r"slurmctld (?:daemon )?(?:must|needs to) be restarted", re.I)),
    ("restart_slurmd", re.compile(rf"restart of (?:the |all )?slurmd(?: daemons?)? {_NEEDED}", re.I)),
    ("restart_slurmd", re.compile(r"requires? (?:a )?restart(?:ing)? (?:of )?(?:the |all )?slurmd", re.I)),
    ("restart_slurmd", re.compile(r"slurmd (?:daemons? )?(?:must|need to|needs to) be restarted", re.I)),
    ("restart_slurmd", re.compile(r"requires .{0,80}\band restart slurmd\b", re.I)),
    ("restart_slurmctld", re.compile(r"takes? effect (?:only )?(?:up)?on (?:a )?restart of (?:the )?slurmctld", re.I)),
    ("restart_slurmctld", re.compile(r"only be done by restarting (?:the )?slurmctld", re.I)),
    ("restart_all", re.compile(r"all slurm daemons(?:,? and commands|, commands and running jobs)? must be "
                               r"(?:terminated|restarted)(?! or reconfigured)", re.I)),
    ("restart_all", re.compile(r"requires? restarting (?:the |all )?slurm daemons", re.I)),
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


def restart_note(text: str) -> tuple[str, str] | None:
    """The change kind a parameter's man text states, with the sentences that state it; None if it states none.

    Several sentences (e.g. "slurmctld must be restarted" and "slurmd must be restarted") add up.
    """
    kinds, sentences = [], []
    for sentence in _SENTENCE.split(text):
        for kind, pattern in RESTART_PATTERNS:
            if pattern.search(sentence):
                kinds.append(kind)
                sentences.append(sentence.strip())
                break
    if not kinds:
        return None
    ctld = any(k in ("restart_slurmctld", "restart_all") for k in kinds)
    slurmd = any(k in ("restart_slurmd", "restart_all") for k in kinds)
    kind = "restart_all" if ctld and slurmd else "restart_slurmctld" if ctld else "restart_slurmd"
    return kind, " ".join(sentences)


def restart_mentions(text: str) -> list[str]:
    """Sentences that mention restart/reconfigure at all (used to review what RESTART_PATTERNS leaves out)."""
    return [s.strip() for s in _SENTENCE.split(text) if re.search(r"restart|reconfig", s, re.I)]


# --------------------------------------------------------------------------- C parser tables

_TABLE = re.compile(r"s_p_options_t\s+(\w+)\s*\[\]\s*=\s*\{(.*?)\{\s*NULL\s*\}\s*,?\s*\};", re.S)
_ENTRY = re.compile(r'\{\s*"(\w+)"\s*,\s*(S_P_\w+)\s*(?:,\s*([^,}]*))?[^{}]*\}')
_DESIGNATED = re.compile(r'\{\s*\.key\s*=\s*"(\w+)"\s*,\s*\.type\s*=\s*(S_P_\w+)\s*,?(?:\s*\.handler\s*=\s*(\w+))?'
                         r"[^{}]*\}", re.S)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


@dataclass(frozen=True)
class COption:
    """One key of an `s_p_options_t` table."""

    name: str
    c_type: str  # S_P_STRING, S_P_UINT16, ...
    handler: str  # the handler function, '' when none (e.g. _defunct_option, _parse_nodename)


def parse_c_tables(source: str) -> list[tuple[str, list[COption]]]:
    """Every `s_p_options_t NAME[] = {...}` table of a C file, in file order, with its keys."""
    source = _COMMENT.sub("", source)
    tables = []
    for match in _TABLE.finditer(source):
        body = match.group(2)
        options = [COption(m.group(1), m.group(2), (m.group(3) or "").strip())
                   for m in _DESIGNATED.finditer(body)]
        options += [COption(m.group(1), m.group(2), (m.group(3) or "").strip().rstrip(","))
                    for m in _ENTRY.finditer(body)]
        tables.append((match.group(1), options))
    return tables
