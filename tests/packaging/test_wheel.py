"""A non-editable install: the wheel holds one top-level package, and its commands run outside the checkout."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.wheel_fixture import REPO, InstalledWheel

pytestmark = pytest.mark.timeout(1200)


def _run(wheel: InstalledWheel, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the venv's `reconciler` from a directory outside the checkout, with no PYTHONPATH."""
    return subprocess.run([str(wheel.reconciler), *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={"PATH": f"{wheel.prefix / 'bin'}:/usr/bin:/bin", "HOME": str(cwd)})


def test_the_wheel_holds_only_the_reconciler_package(installed_wheel: InstalledWheel, tmp_path: Path) -> None:
    """drivers and checks are installed as reconciler.drivers / reconciler.checks; bench and tests are not."""
    names = zipfile.ZipFile(installed_wheel.wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"reconciler"}
    assert "reconciler/drivers/slurm_config.py" in names and "reconciler/checks/nccl/parser.py" in names
    assert "reconciler/params/data/slurm.conf.json" in names
    site = installed_wheel.site_packages()
    for name in ("drivers", "checks", "bench", "tests"):
        assert not (site / name).exists(), f"{name} installed at top level"
    listed = subprocess.run([str(installed_wheel.python), "-c", (
        "import importlib.metadata as m, json;"
        "print(json.dumps(sorted({str(f).split('/')[0] for f in m.distribution('reconciler').files})))")],
        capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert [n for n in json.loads(listed) if not n.endswith(".dist-info") and n != ".."] == ["reconciler"]


def test_installed_commands_run_outside_the_checkout(installed_wheel: InstalledWheel, tmp_path: Path) -> None:
    """--version, validate, render, schema, import and the check commands work from the installed wheel."""
    version = _run(installed_wheel, "--version", cwd=tmp_path)
    assert version.returncode == 0 and "reconciler, version" in version.stdout
    imported = subprocess.run([str(installed_wheel.python), "-c", "import reconciler; print(reconciler.__file__)"],
                              capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert imported.startswith(str(installed_wheel.site_packages())), imported

    valid = _run(installed_wheel, "validate", str(REPO / "desired-state"), cwd=tmp_path)
    assert valid.returncode == 0, valid.stderr
    rendered = _run(installed_wheel, "render", str(REPO / "desired-state"), "--node", "dgx01",
                    "--file", "slurm.conf", cwd=tmp_path)
    assert rendered.returncode == 0 and "NodeName=dgx[01-04] " in rendered.stdout, \
        rendered.stdout[-2000:] + rendered.stderr
    schema = json.loads(_run(installed_wheel, "schema", cwd=tmp_path).stdout)
    assert "cluster" in schema["properties"]

    out = tmp_path / "imported"
    # the import reads the slurm.conf the wheel just rendered (no third-party file needed)
    source = tmp_path / "rendered"
    source.mkdir()
    (source / "slurm.conf").write_text(rendered.stdout)
    adopted = _run(installed_wheel, "import", str(source), "--out", str(out), "--slurm-version", "23.11",
                   cwd=tmp_path)
    assert adopted.returncode == 0, adopted.stderr
    assert _run(installed_wheel, "validate", str(out), cwd=tmp_path).returncode == 0

    parsed = _run(installed_wheel, "nccl", "parse", str(REPO / "tests/fixtures/nccl/h200x2_all_reduce_perf.txt"),
                  "--format", "json", cwd=tmp_path)
    assert parsed.returncode == 0 and json.loads(parsed.stdout), parsed.stderr
    for group in ("check", "run", "status", "history", "plan", "apply", "facts"):
        helped = _run(installed_wheel, group, "--help", cwd=tmp_path)
        assert helped.returncode == 0 and "Usage:" in helped.stdout, (group, helped.stderr)


def test_shell_completion_script_is_generated(installed_wheel: InstalledWheel, tmp_path: Path) -> None:
    """The completion line the README documents yields a bash function naming the commands."""
    proc = subprocess.run([str(installed_wheel.reconciler)], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "_RECONCILER_COMPLETE": "bash_source"})
    assert proc.returncode == 0 and "_reconciler_completion" in proc.stdout
    words = subprocess.run([str(installed_wheel.reconciler)], capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin", "_RECONCILER_COMPLETE": "bash_complete",
                                "COMP_WORDS": "reconciler pl", "COMP_CWORD": "1"})
    assert "plain,plan" in words.stdout, words.stdout
