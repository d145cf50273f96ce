# STAND-IN for pkg_resources (testbed only): supervisord imports setuptools' pkg_resources just to resolve
# "module:attr" specs, which costs ~8 MB and ~60 ms per node. Testbed nodes run supervisord with this tiny
# module first on PYTHONPATH (set for supervisord and its programs only). Installed only inside nodes.
"""Minimal pkg_resources for supervisord in testbed nodes: EntryPoint.parse(...).resolve()."""

from __future__ import annotations

import importlib
from typing import Any


class EntryPoint:
    """An entry point `name = module:attr.attr`."""

    def __init__(self, name: str, module: str, attrs: str) -> None:
        self.name, self.module_name, self.attrs = name, module, attrs

    @classmethod
    def parse(cls, src: str) -> EntryPoint:
        """Parse `name = module:attrs`."""
        name, _, value = src.partition("=")
        module, _, attrs = value.strip().partition(":")
        return cls(name.strip(), module.strip(), attrs.strip())

    def resolve(self) -> Any:
        """Import the module and walk the attributes."""
        obj: Any = importlib.import_module(self.module_name)
        for attr in filter(None, self.attrs.split(".")):
            obj = getattr(obj, attr)
        return obj

    def load(self, require: bool = True) -> Any:
        """Old name of resolve."""
        return self.resolve()
