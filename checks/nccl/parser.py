"""Parser for nccl-tests output, text or JSON (-J): a saved output or file, told apart by its first character.

The text layouts are read by text_output.py (its table by table.py), the JSON document by json_output.py.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.checks.nccl.json_output import parse_json
from reconciler.checks.nccl.models import NcclRun
from reconciler.checks.nccl.text_output import parse_text


def parse_output(text: str, *, exit_code: int | None = None, collective: str | None = None) -> NcclRun:
    """Parse a saved output, text or JSON, telling them apart by the first character."""
    if text.lstrip().startswith("{"):
        return parse_json(text, exit_code=exit_code, collective=collective)
    return parse_text(text, exit_code=exit_code, collective=collective)


def parse_file(path: str | Path, *, exit_code: int | None = None, collective: str | None = None) -> NcclRun:
    """Parse a saved output file, text or JSON."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return parse_output(text, exit_code=exit_code, collective=collective)
