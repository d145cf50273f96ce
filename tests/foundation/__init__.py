"""Tests of the foundation: schema, loader, hostlists, renderers, CLI (issue 2)."""
