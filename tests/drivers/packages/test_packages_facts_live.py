"""The package snippet run for real inside the fact script on this host (real /var/lib/dpkg/status, real
apt-cache): a converged spec spawns nothing; an unsatisfied one asks apt-cache madison."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from reconciler.facts import packages as pkgfacts
from reconciler.facts.gather import REMOTE_SCRIPT, FactRequest

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None or shutil.which("apt-cache") is None,
                                reason="needs dpkg and apt (Debian host)")


def _installed(name: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True, check=True)
    return out.stdout


def _ask(specs: dict[str, tuple[pkgfacts.Kind, str]]) -> tuple[str, pkgfacts.PackageFacts]:
    req = FactRequest(python={pkgfacts.FACTS_KEY: pkgfacts.snippet(None, specs, False)})
    out = subprocess.run(["python3", "-I", "-S", "-c", REMOTE_SCRIPT], input=req.encode(), capture_output=True,
                         text=True, check=True, timeout=120)
    answer = json.loads(out.stdout)["commands"][pkgfacts.FACTS_KEY]
    return answer["stdout"], pkgfacts.parse_answer(answer, set(specs))


def test_converged_node_spawns_nothing() -> None:
    """dpkg at its installed version, apt present, a package absent that is absent: no madison section."""
    raw, facts = _ask({"dpkg": ("exact", _installed("dpkg")), "apt": ("present", "present"),
                       "surely-not-a-package": ("absent", "absent")})
    assert facts.backend == "apt" and facts.errors == [] and facts.asked == []
    assert "madison" not in raw
    assert facts.installed["dpkg"].version == _installed("dpkg")


def test_unsatisfied_asks_madison_for_those_only() -> None:
    """dpkg at another version, apt satisfied: madison asked for dpkg only, its candidates parsed."""
    raw, facts = _ask({"dpkg": ("exact", "0.1-1"), "apt": ("present", "present")})
    assert facts.asked == ["dpkg"] and "madison 0\n" in raw
    assert set(facts.candidates) == {"dpkg"}
    assert facts.candidates["dpkg"], "apt-cache madison offered no dpkg version on this host"
