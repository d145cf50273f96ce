"""The schema package's shape (issue 36): modules import their siblings, never the package; the package re-exports
every name the code imports from it; each module can be imported first and leaves every model complete."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import reconciler.model as model_package
from tests.desired_fixtures import REPO

MODEL_DIR = REPO / "reconciler" / "model"
MODULES = sorted(p.stem for p in MODEL_DIR.glob("*.py") if p.name != "__init__.py")
SUBMODULES = set(MODULES)


def _package_imports(tree: ast.AST) -> list[str]:
    """The imports in TREE that reach the package `reconciler.model` itself rather than one of its modules."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "reconciler.model"]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if node.module == "reconciler":
                found += ["reconciler.model" for a in node.names if a.name == "model"]
            elif node.module == "reconciler.model":
                found += [f"reconciler.model.{a.name}" for a in node.names if a.name not in SUBMODULES]
    return found


def test_no_module_of_the_package_imports_the_package() -> None:
    wrong = {name: found for name in MODULES
             if (found := _package_imports(ast.parse((MODEL_DIR / f"{name}.py").read_text())))}
    assert wrong == {}


def test_the_walker_sees_a_package_import() -> None:
    tree = ast.parse("from reconciler import model\nfrom reconciler.model import Strict, values\n")
    assert _package_imports(tree) == ["reconciler.model", "reconciler.model.Strict"]


def _names_imported_from_package() -> set[str]:
    names: set[str] = set()
    for root in ("reconciler", "drivers", "checks", "bench", "deploy", "tests"):
        for path in (REPO / root).rglob("*.py"):
            if "__pycache__" in path.parts or path.parent == MODEL_DIR:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "reconciler.model" and not node.level:
                    names |= {a.name for a in node.names}
    return names


def test_the_package_exports_every_name_imported_from_it() -> None:
    imported = _names_imported_from_package()
    assert "DesiredState" in imported  # the scan found the imports
    assert sorted(imported - set(model_package.__all__)) == []
    assert [n for n in model_package.__all__ if not hasattr(model_package, n)] == []
    assert len(set(model_package.__all__)) == len(model_package.__all__)


@pytest.mark.parametrize("module", MODULES)
def test_a_module_imported_first_leaves_every_model_complete(module: str) -> None:
    """In a fresh interpreter, import one module of the package first: every model of the package is built."""
    code = (f"import importlib, pydantic\nimportlib.import_module('reconciler.model.{module}')\n"
            "import reconciler.model as m\n"
            "print([n for n in m.__all__ if isinstance(getattr(m, n), type) and issubclass(getattr(m, n), "
            "pydantic.BaseModel) and not getattr(m, n).__pydantic_complete__])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_module_sizes_are_small() -> None:
    long = {p.name: n for p in MODEL_DIR.glob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}
    assert Path(model_package.__file__).read_text().count("\nclass ") == 0  # the package only re-exports
