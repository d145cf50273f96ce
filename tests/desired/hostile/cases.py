"""The hostile-input cases of tests/desired/hostile/cases/: each a YAML fragment merged into a valid desired state.

A case file holds `expect` (a fragment of the error message), optionally `at` (the key path the error must
name), and either `merge` (a fragment merged into the base state: mappings key by key, lists item by
item) or `raw` / `raw_repeat` (a file of its own, for what cannot be a fragment: alias bombs, nesting).
"""

from __future__ import annotations

from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tests.engine.testbed_state import write_state

CASES_DIR = Path(__file__).parent / "cases"
FILE_OF = {"cluster": "cluster.yaml", "ssh": "nodes.yaml", "nodes": "nodes.yaml", "storage": "storage.yaml",
           "images": "storage.yaml", "patches": "patches.yaml", "checks": "checks.yaml"}


@dataclass(frozen=True)
class Case:
    """One hostile input and what its refusal must say."""

    name: str
    why: str
    expect: str
    at: str | None
    merge: dict[str, Any] | None
    raw: str | None


def load_cases() -> list[Case]:
    """Every case file, in name order."""
    out = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
        why = path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
        raw = data.get("raw")
        if "raw_repeat" in data:
            raw = (data["raw_repeat"]["line"] + "\n") * int(data["raw_repeat"]["times"])
        out.append(Case(path.stem, why, data["expect"], data.get("at"), data.get("merge"), raw))
    return out


def merge(base: Any, fragment: Any) -> Any:
    """FRAGMENT over BASE: mappings merged key by key, lists item by item, anything else replaced."""
    if isinstance(base, dict) and isinstance(fragment, dict):
        out = dict(base)
        for key, value in fragment.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(fragment, list):
        out_list = list(base)
        for index, value in enumerate(fragment):
            if index < len(out_list):
                out_list[index] = merge(out_list[index], value)
            else:
                out_list.append(value)
        return out_list
    return fragment


def write_case(case: Case, directory: Path, *, state_dir: Path, subnet: str, computes: str = "gpu[01-02]",
               name: str = "hostile") -> Path:
    """Write the base desired state (tests/engine/testbed_state.py) with the case applied; return the directory."""
    write_state(directory, name=name, state_dir=state_dir, subnet=subnet, computes=computes)
    if case.raw is not None:
        (directory / "hostile.yaml").write_text(case.raw, encoding="utf-8")
    for key, fragment in (case.merge or {}).items():
        path = directory / FILE_OF[key]
        yaml = YAML(typ="safe")
        doc = yaml.load(path.read_text(encoding="utf-8")) if path.exists() else {}
        doc[key] = merge(doc.get(key), fragment)
        out = StringIO()
        yaml.dump(doc, out)
        path.write_text(out.getvalue(), encoding="utf-8")
    return directory
