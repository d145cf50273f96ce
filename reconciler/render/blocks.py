"""Managed blocks inside files we share with the admin (/etc/exports, /etc/fstab)."""

from __future__ import annotations

BEGIN = "# BEGIN reconciler managed"
END = "# END reconciler managed"


class BlockError(ValueError):
    """The file's managed-block markers are broken (e.g. BEGIN without END)."""


def find_block(text: str) -> tuple[int, int] | None:
    """Return the (begin, end) line indexes of the managed block, or None when absent."""
    lines = text.splitlines()
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if not begins and not ends:
        return None
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise BlockError(f"managed block markers are broken ({len(begins)} BEGIN, {len(ends)} END)")
    return begins[0], ends[0]


def block_body(text: str) -> list[str] | None:
    """The lines between the markers, or None when the file has no managed block."""
    span = find_block(text)
    if span is None:
        return None
    return text.splitlines()[span[0] + 1 : span[1]]


def replace_block(text: str, body: list[str] | None) -> str:
    """Return `text` with the managed block set to `body` (None removes it); other lines untouched."""
    lines = text.splitlines()
    span = find_block(text)
    block = [BEGIN, *body, END] if body is not None else []
    if span is None:
        if body is None:
            return text
        # Adopting a file written by hand: a line the new block holds moves into it instead of being doubled.
        wanted = {" ".join(line.split()) for line in body}
        out = [*(line for line in lines if " ".join(line.split()) not in wanted), *block]
    else:
        out = [*lines[: span[0]], *block, *lines[span[1] + 1 :]]
    return "\n".join(out) + "\n" if out else ""
