"""Renderers: pure functions from the desired state to file contents (no I/O)."""

from reconciler.render.files import MANAGED_FILES, managed_files_for, render_file

__all__ = ["MANAGED_FILES", "managed_files_for", "render_file"]
