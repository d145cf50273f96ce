"""Describe where a desired state came from (repo directory and commit), for file headers."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(root: Path) -> str | None:
    """The commit of the Git work tree holding `root`, or None outside Git."""
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def describe_source(root: Path, commit: str | None = None) -> str:
    """A short, node-independent description such as `desired-state @ 1a2b3c4d5e6f`."""
    commit = commit or git_commit(root)
    name = root.resolve().name
    return f"{name} @ {commit[:12]}" if commit else name
