"""The one PR comment several daemons write (one section each): a read-modify-write that re-reads the body
right before writing and starts again when it changed, so that no daemon erases another's section.

Forges have no conditional write for comments, so a write can still land between the re-read and the PATCH;
the daemon that lost its section finds it missing on its next cycle (pr_sections.section_is_current) and
writes it again.
"""

from __future__ import annotations

from collections.abc import Callable

from reconciler.engine.report import MARKER
from reconciler.forge.base import Forge, ForgeError, PullRequest, Upserted

ATTEMPTS = 5
SUPERSEDED = ("_The reconciler's plan is in its comment above: two cluster daemons created a comment at the same "
              "time, this one was folded into it._")


def update_shared_comment(forge: Forge, pr: PullRequest, compose: Callable[[str | None], str],
                          attempts: int = ATTEMPTS) -> Upserted:
    """Write COMPOSE(current body) into our comment on PR (created when there is none), re-reading right before
    the write and starting again, at most ATTEMPTS times, when somebody changed it in between."""
    for attempt in range(1, attempts + 1):
        found = forge.find_comment(pr, MARKER)
        body = compose(found.body if found is not None else None)
        if len(body) > forge.comment_limit:
            raise ValueError(f"comment of {len(body)} characters is over the forge's limit of {forge.comment_limit}")
        if found is None:
            try:
                created = forge.create_comment(pr, body)
            except ForgeError as exc:
                forge.after_failed_create(exc, attempt, attempts)
                continue
            first = forge.find_comment(pr, MARKER)
            if first is not None and first.id != created.id:
                # another daemon created one at the same time: ours stops being ours, our section goes into theirs
                forge.edit_comment(pr, created, SUPERSEDED)
                continue
            return Upserted(created, "created")
        if body == found.body:
            return Upserted(found, "unchanged")
        fresh = forge.find_comment(pr, MARKER)
        if fresh is None or fresh.id != found.id or fresh.body != found.body:
            continue  # changed underneath (another cluster's daemon wrote its section): compose again
        return Upserted(forge.edit_comment(pr, found, body), "edited")
    raise ForgeError(f"the comment on #{pr.number} kept changing while it was being written ({attempts} attempts); "
                     "trying again next cycle")
