"""What the upgrade machine (reconciler/rollout/upgrade.py) asks of its caller per node, and what a driver reload
is, as data: shell commands a workload-manager-aware driver writes (drivers/slurm_reboot.py), hooks the caller
builds (checks/upgrade_gates.py on a real cluster). The machine knows nothing of Slurm. A reboot's commands are
part of the node's `DrainSteps` (engine/drain.py: one step type for drains and reboots).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, Field

from reconciler.engine.drain import DrainSteps


class ReloadSteps(BaseModel):
    """Shell commands, run on the node in order, reloading its driver stack without a reboot."""

    commands: list[str] = Field(default_factory=list)


@dataclass
class Prepared:
    """What applying a node's held changes needs (None: nothing left to apply), how to undo it, and the apply
    itself (returns None when it worked, else why not)."""

    needs: str | None
    undo: list[str]
    apply: Callable[[], str | None]
    summary: str = ""


@dataclass
class Hooks:
    """What the machine asks its caller for, per node."""

    steps: Callable[[str], DrainSteps]  # with their reboot part (engine/drain.py)
    reload: Callable[[str], ReloadSteps]
    prepare: Callable[[str], Prepared]
    validate: Callable[[str], str | None]  # while the node is still drained: None when it passed, else why
    after_resume: Callable[[str], str | None] = lambda node: None  # e.g. a smoke job on the resumed node
    fail: Callable[[str, str], str] | None = None  # the controller command keeping a node drained with a reason
    converge: Callable[[str], str | None] = lambda node: None  # after the reboot: the rest of the desired state
