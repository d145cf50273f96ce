"""Desired-state schema of `motd:`: the message of the day (/etc/motd, or another path) per node selection.

The kind that shows what adding a managed kind takes (README, "Where a change goes"): this model, its field in
DesiredState (reconciler/model/state.py, with its Section), its driver (drivers/motd.py) and its row in the phase
table (drivers/phases.py). Nothing else names it.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from reconciler.model.base import AbsPath, NodeSelection, absolute
from reconciler.model.values import MultilineText

MOTD_PATH = "/etc/motd"


class Motd(NodeSelection):
    """The text of a message-of-the-day file on a set of nodes, written exactly (pam_motd shows it verbatim)."""

    path: AbsPath = Field(default=MOTD_PATH, description="The file, /etc/motd unless said")
    content: MultilineText = Field(description="The whole text; no header is added (users would see it)")

    _abs = field_validator("path")(lambda cls, v: absolute(v))
