"""The table every bench section's results are shown in: plain text for the terminal, markdown for the report.

Sections (hostile, upgrade, ...) build their Table here, and bench/report.py gathers them: this module imports no
section and no report, so the imports go one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    """A titled table with notes under it."""

    key: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """Aligned plain text for the terminal."""
        widths = [max(len(c), *(len(r[i]) for r in self.rows)) if self.rows else len(c)
                  for i, c in enumerate(self.columns)]
        line = "  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True))
        out = [self.title, "=" * len(self.title), line, "  ".join("-" * w for w in widths)]
        out += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in self.rows]
        out += [f"  {note}" for note in self.notes]
        return "\n".join(out) + "\n"

    def markdown(self) -> str:
        """A markdown section: heading, table, notes."""
        out = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |",
               "|" + "|".join("---" for _ in self.columns) + "|"]
        out += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            out += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(out) + "\n"
