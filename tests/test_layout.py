"""The house rules of the layout (issue 36), walked from the source: no import circle, imports only downwards
through the layers, no module past 500 lines, and the README's layer map naming every package.

Every `import` counts: at module level, inside functions (a late import is still a dependency) and under
`if TYPE_CHECKING:` (a type-only circle still ties two modules together for the reader).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Bottom to top: a package imports its own modules and those of the layers below it, never above.
LAYERS: tuple[str, ...] = (
    "common", "params", "model", "desired", "render", "transport", "facts", "engine", "drivers", "importer",
    "checks", "rollout", "ha", "forge", "daemon", "cli",
)
MAX_LINES = 500
SOURCE_ROOTS = ("reconciler", "drivers", "checks", "bench", "deploy", "tests")


def _module_name(path: Path) -> str:
    """The dotted name a file is imported as (drivers/ and checks/ through their reconciler/ links)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] in ("drivers", "checks"):
        parts = ["reconciler", *parts]
    return ".".join(parts)


def python_files(*roots: str) -> Iterator[Path]:
    """Every tracked-looking .py file under the roots (the reconciler/ links to drivers/ and checks/ not followed)."""
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).parts
            if "__pycache__" in rel or rel[:2] in (("reconciler", "drivers"), ("reconciler", "checks")):
                continue
            yield path


def import_graph(*roots: str) -> dict[str, set[str]]:
    """module -> the first-party modules it imports, anywhere in its body."""
    files = {_module_name(p): p for p in python_files(*roots)}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets = [f"{base}.{alias.name}" for alias in node.names]  # a module, or a name in `base`
            for target in targets:
                found = resolve(target)
                if found and found != name:
                    edges.add(found)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer_of(module: str) -> str | None:
    """The layer package of a reconciler module (None for the root package itself)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "reconciler" and len(parts) > 1 else None


def test_no_import_circle() -> None:
    graph = import_graph("reconciler", "drivers", "checks", "bench")
    assert cycles(graph) == []


def test_the_walker_sees_a_circle_and_a_late_import(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    late = ast.parse("def f():\n    from reconciler.engine import plan\n")
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(late))


def test_every_package_is_a_known_layer() -> None:
    packages = {p.name for p in (REPO / "reconciler").iterdir()
                if (p / "__init__.py").exists() and p.name != "__pycache__"}
    assert packages == set(LAYERS)


def test_imports_go_only_downwards() -> None:
    upward = []
    for module, imported in import_graph("reconciler", "drivers", "checks").items():
        here = layer_of(module)
        if here is None:
            continue
        for target in imported:
            there = layer_of(target)
            if there is not None and LAYERS.index(there) > LAYERS.index(here):
                upward.append(f"{module} ({here}) imports {target} ({there})")
    assert upward == []


def test_nothing_but_the_version_at_the_top() -> None:
    loose = sorted(p.name for p in (REPO / "reconciler").glob("*.py") if p.name != "__init__.py")
    assert loose == []


@pytest.mark.parametrize("root", SOURCE_ROOTS)
def test_no_module_over_500_lines(root: str) -> None:
    long = {str(p.relative_to(REPO)): n for p in python_files(root)
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_readme_map_names_every_layer() -> None:
    text = (REPO / "README.md").read_text()
    section = text.split("## How it is built", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^\s*(?:reconciler/)?([a-z_]+)/\s", section, re.M)
    order = [name for name in named if name in LAYERS]
    assert order == [name for name in reversed(LAYERS)] or order == list(LAYERS)


_ON_A_DRIVER = re.compile(r"\b(?:getattr|hasattr)\(\s*(?:driver|d|drv)\b")
_PLAN_WRITE = re.compile(r"\bplan\.(?:changes|warnings|errors|followups)\s*(?:\+?=(?!=)|\[[^\]]*\]\s*=(?!=))"
                         r"|\bplan\.(?:changes|warnings|errors|followups)\.(?:append|extend|insert|remove|pop|clear)\(")
_PHASE_NUMBER = re.compile(r"^\s*(?:phase|[A-Z_]*PHASE[A-Z_]*)\s*=\s*\d+\b", re.M)


def test_the_driver_contract_is_called_never_looked_up() -> None:
    """The engine calls the contract of reconciler/engine/driver.py: no getattr/hasattr on a driver anywhere."""
    found = [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}"
             for path in python_files("reconciler", "drivers", "checks")
             for text in [path.read_text()] for m in _ON_A_DRIVER.finditer(text)]
    assert found == [], found


def slurm_imports(package: str) -> list[str]:
    """`module: imported name` for each import in PACKAGE (reconciler/PACKAGE) of a module or name that says slurm."""
    found = []
    for path in python_files(f"reconciler/{package}"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module or ''}.{alias.name}" for alias in node.names]
            found += [f"{path.relative_to(REPO)}: {n}" for n in names if "slurm" in n.lower()]
    return found


def private_imports(*roots: str) -> list[str]:
    """`file:line name` for each private name (`_x`) one first-party module takes from another: imported, or read
    as an attribute of an imported first-party module."""
    first_party = ("reconciler", "bench", "deploy", "tests")
    found = []
    for path in python_files(*roots):
        tree = ast.parse(path.read_text(), str(path))
        modules: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {alias.asname or alias.name for alias in node.names
                            if alias.name.split(".")[0] in first_party}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in first_party:
                found += [f"{path.relative_to(REPO)}:{node.lineno} {alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
                modules |= {alias.asname or alias.name for alias in node.names}
        found += [f"{path.relative_to(REPO)}:{node.lineno} {node.value.id}.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in modules and node.attr.startswith("_") and not node.attr.startswith("__")]
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    """A module's `_private` names are its own: no other module of the product or the bench imports or reads one
    (what others need is public, with a docstring)."""
    assert private_imports("reconciler", "drivers", "checks", "bench", "deploy") == []


def test_the_engine_knows_no_slurm() -> None:
    """What the engine needs of Slurm comes through the driver contract: it imports no module or name that says
    slurm (the drivers that know Slurm provide it: drivers/step_order.py, drivers/slurm_config.py, ...)."""
    assert slurm_imports("engine") == []


def test_the_rollout_knows_no_slurm() -> None:
    """What the rollout needs of Slurm, the drivers and the checks comes through engine/workload.py (RolloutSite,
    passed in by the CLI and the daemon: checks/rollout_site.py): reconciler/rollout imports nothing from drivers/
    or checks/ and no module or name that says slurm."""
    found = slurm_imports("rollout")
    for path in python_files("reconciler/rollout"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(REPO)}: {m}" for m in modules
                      if m.split(".")[:2] in (["reconciler", "drivers"], ["reconciler", "checks"])
                      or m.split(".")[0] in ("drivers", "checks")]
    assert found == [], found


def test_no_driver_changes_the_plan_in_place() -> None:
    """A driver's review returns edits (engine/review.py) and its followups return steps: no driver writes the
    plan's changes, warnings, errors or follow-ups itself."""
    found = [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}"
             for path in python_files("drivers", "checks")
             for text in [path.read_text()] for m in _PLAN_WRITE.finditer(text)]
    assert found == [], found


def test_phase_numbers_live_in_the_phase_table() -> None:
    """Every driver's place in the apply order is read from drivers/phases.py; no module writes a phase number."""
    found = [str(path.relative_to(REPO)) for path in python_files("drivers")
             if path.name != "phases.py" and _PHASE_NUMBER.search(path.read_text())]
    assert found == [], found
    from reconciler.drivers import all_drivers
    from reconciler.drivers.phases import PHASES
    numbers = {p.number for p in PHASES.values()}
    assert all(d.phase in numbers for d in all_drivers())
    assert all(p.why for p in PHASES.values())
