"""What a rollout's rollback did, as lines for `reconciler apply`, the daemon's status and its notifications:
only what was put back is called so."""

from __future__ import annotations

from typing import Any

from reconciler.common import hostlist

FIRST_COMMIT = "no earlier commit to go back to"  # why the daemon's first commit restores before-images


def rollback_lines(rollback: dict[str, Any], why: str = "no --previous") -> list[str]:
    """The rollback record of a rollout (RolloutResult.rollback) as lines; none when nothing was rolled back.
    WHY says, for a before-image restore, why there was no earlier state to go back to."""
    if not rollback.get("nodes"):
        return []
    resumed = rollback.get("resumed") or []
    # an upgrade's failed nodes: rolled back too, but never resumed by the reconciler
    drained = [f"{node}: left drained for a human: {why}"
               for node, why in sorted((rollback.get("left_drained") or {}).items())]
    if not rollback.get("before_image"):
        to = f"commit {str(rollback['to'])[:12]}" if rollback.get("to") else "the --previous state"
        if rollback.get("ok"):
            head = f"rolled back {rollback['nodes']} to {to}"
        else:
            head = f"rollback of {rollback['nodes']} to {to} FAILED: " + "; ".join(
                [str(e) for e in rollback.get("errors") or []] + ([str(rollback["error"])] if rollback.get("error")
                                                                   else []))
        return [head + (f"; resumed {', '.join(resumed)}" if resumed else "")] + drained
    lines = []
    restored, unchanged = rollback.get("restored") or {}, rollback.get("unchanged") or {}
    missing = rollback.get("not_restored") or {}
    if restored or resumed:
        lines.append(f"restored to the state the apply found ({why}):")
        lines += [f"  {node}: {what}" for node, items in sorted(restored.items()) for what in items]
        lines += [f"  {node}: resumed (drained during the rollout)" for node in resumed]
    if unchanged:
        lines.append("already as before (restored before a restart, or the change never landed there):"
                     if rollback.get("after_restart") else "already as before (the change never landed there):")
        lines += [f"  {node}: {what}" for node, items in sorted(unchanged.items()) for what in items]
    if missing:
        lines.append("NOT restored:")
        lines += [f"  {node}: {what}" for node, items in sorted(missing.items()) for what in items]
    if rollback.get("upgrade_errors"):  # the upgrade machine's own undo (a downgrade, a reboot) of these nodes
        lines.append("upgrade NOT rolled back:")
        lines += [f"  {error}" for error in rollback["upgrade_errors"]]
    if not lines:
        lines.append(f"nothing to restore on {rollback['nodes']}")
    return lines + drained


def restore_headline(rollback: dict[str, Any]) -> str:
    """One line for a before-image restore (RolloutResult.rollback with `before_image`): its nodes, and whether
    every resource came back; it names no commit, there being none to go back to."""
    missing = rollback.get("not_restored") or {}
    stuck = [str(e).split(":", 1)[0] for e in rollback.get("upgrade_errors") or []]
    if stuck:
        return (f"restore of {rollback.get('nodes')} to the state found before the apply (before-images) INCOMPLETE: "
                f"the upgrade's rollback failed on {hostlist.compress(sorted(set(stuck)))}")
    if not missing:
        return (f"restored {rollback.get('nodes')} to the state found before the apply (before-images; "
                f"{FIRST_COMMIT})")
    count = sum(len(items) for items in missing.values())
    return (f"restore of {rollback.get('nodes')} to the state found before the apply (before-images) INCOMPLETE: "
            f"{count} resource(s) not restored on {hostlist.compress(sorted(missing))}")
