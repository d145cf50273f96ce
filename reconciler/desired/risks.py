"""Risk warnings: valid desired states that are probably not what the author meant (issue 13).

They are warnings, not errors: `reconciler validate` prints them, `plan` carries them in the plan's
warnings, and the PR comment lists them; nothing is refused for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.desired import targets
from reconciler.desired.loader import ConfigError, KeyPath, LoadedState
from reconciler.model import DesiredState, Patch
from reconciler.model.values import is_wide_client, is_world_client

SCRIPT_SUFFIXES = (".sh", ".bash", ".py", ".pl")


@dataclass(frozen=True)
class RiskWarning(ConfigError):
    """A risky but valid setting, with where it is: `file:line:col: key.path: message`."""


def auth_type(state: DesiredState) -> tuple[str, KeyPath]:
    """slurm.conf's AuthType and the key path that sets it (the one place that reads it)."""
    for key, value in state.cluster.slurm_conf.written().items():
        if key.lower() == "authtype":
            return str(value), ("cluster", "slurm_conf", key)
    return "auth/munge", ("cluster", "slurm_conf")  # Slurm's default when the key is not set


def _is_script(patch: Patch) -> bool:
    if patch.path.endswith(SCRIPT_SUFFIXES):
        return True
    return patch.content is not None and patch.content.startswith("#!")


def _risks(state: DesiredState) -> list[tuple[KeyPath, str]]:
    out: list[tuple[KeyPath, str]] = []
    for i, export in enumerate(state.storage.exports):
        squash_off = "no_root_squash" in export.options
        for j, client in enumerate(export.clients):
            path: KeyPath = ("storage", "exports", i, "clients", j)
            if is_world_client(client):
                out.append((path, f"{export.path} is exported to every host ({client})"))
            if squash_off and is_wide_client(client):
                out.append((path, f"{export.path} is exported with no_root_squash to a wide network ({client}): "
                                  "root on any host there is root on the export"))
    value, path = auth_type(state)
    if value.strip().lower() == "auth/none":
        out.append((path, "AuthType=auth/none: any user can impersonate any other (and root) to Slurm"))
    for i, patch in enumerate(state.patches):
        if patch.mode is not None and int(patch.mode, 8) & 0o002:
            out.append((("patches", i, "mode"), f"{patch.path} is world-writable (mode {patch.mode})"))
        if patch.validate_cmd is None and _is_script(patch):
            out.append((("patches", i), f"{patch.path} is a script and has no validate command: a syntax error "
                                        "reaches the nodes as is (e.g. validate: 'sh -n %s')"))
    out += list(targets.risks(state))
    return out


def risk_warnings(loaded: LoadedState) -> list[RiskWarning]:
    """Every risk warning of a loaded desired state, with file:line:col where the key is."""
    return [RiskWarning(loaded.where(path), path, message) for path, message in _risks(loaded.state)]

