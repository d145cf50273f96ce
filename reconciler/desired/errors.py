"""What loading a desired state gives and how it fails: key paths, locations, ConfigError, LoadedState.

The loader, the modules it calls (agesecrets, managed, errorder) and their users import these types from here;
`reconciler.desired.loader` re-exports them, so `from reconciler.desired.loader import ConfigError` still works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reconciler.desired.overlay import Removal
from reconciler.model import DesiredState

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Location:
    """A place in a YAML file (1-based line and column)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class ConfigError:
    """One problem in the desired state, with where it is and what was expected."""

    location: Location | None
    path: KeyPath
    message: str

    def key_path(self) -> str:
        """Render the key path as `cluster.partitions[0].nodes`."""
        out = ""
        for part in self.path:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        return out or "(top level)"

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{where}{self.key_path()}: {self.message}"


class DesiredStateError(Exception):
    """Raised when a desired-state directory does not load; holds every error found."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


@dataclass
class LoadedState:
    """A validated desired state and where each of its keys came from."""

    state: DesiredState
    root: Path
    locations: dict[KeyPath, Location] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    commit: str | None = None
    cluster: str | None = None  # the cluster of a multi-cluster repository (desired/clusters.py); None: the only one
    trace: dict[KeyPath, list[Location]] = field(default_factory=dict)  # every layer that set a key, earliest first
    removed: dict[KeyPath, list[Removal[Location]]] = field(default_factory=dict)  # list path -> items removed

    def where(self, path: KeyPath) -> Location | None:
        """Return the location of a key path, or of its nearest ancestor that has one."""
        return nearest(self.locations, path)


def nearest(locations: dict[KeyPath, Location], path: KeyPath) -> Location | None:
    """The location of PATH, or of its nearest ancestor that has one."""
    for end in range(len(path), -1, -1):
        loc = locations.get(tuple(path[:end]))
        if loc is not None:
            return loc
    return None
