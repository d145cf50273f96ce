"""reconciler/common/versions.py against the real tools: dpkg --compare-versions (live), rpm.vercmp (recorded, and live
where rpm is installed), and the glob and resolve rules."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.common.versions import check_spec, deb_compare, highest, matches, resolve, rpm_compare

FIXTURES = Path(__file__).parent.parent / "facts"
DEB_PART = st.text(alphabet="0123456789abz.+~", min_size=0, max_size=6)
REV_PART = st.text(alphabet="0123456789abz.+~", min_size=1, max_size=4)


@st.composite
def deb_versions(draw: st.DrawFn) -> str:
    """Valid Debian versions: [epoch:]upstream[-revision], upstream starting with a digit."""
    text = draw(st.sampled_from("0123456789")) + draw(DEB_PART)
    if draw(st.booleans()):
        text += "-" + draw(REV_PART)
    if draw(st.integers(0, 3)) == 0:
        text = f"{draw(st.integers(0, 3))}:{text}"
    return text


def _dpkg(a: str, op: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode == 0


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")
@settings(max_examples=300, deadline=None)
@given(deb_versions(), deb_versions())
def test_deb_compare_is_dpkgs(a: str, b: str) -> None:
    """Our Debian order is dpkg's on generated versions."""
    real = -1 if _dpkg(a, "lt", b) else 0 if _dpkg(a, "eq", b) else 1
    assert deb_compare(a, b) == real, (a, b)


def test_deb_known_orders() -> None:
    """Tilde before the end, epoch first, revision last."""
    assert deb_compare("1.0~rc1", "1.0") == -1
    assert deb_compare("1:0.1", "2.0") == 1
    assert deb_compare("2026b-0+deb12u1", "2025b-0+deb12u2") == 1
    assert deb_compare("1.0", "1.0-0") == 0


def test_rpm_compare_matches_recorded_rpm_vercmp() -> None:
    """Our rpm order is rpm 4.18's on 608 recorded pairs (tests/facts/rpm_vercmp/pairs.tsv)."""
    lines = [line.split("\t") for line in (FIXTURES / "rpm_vercmp" / "pairs.tsv").read_text().splitlines()
             if line and not line.startswith("#")]
    assert len(lines) > 600
    wrong = [(a, b, r) for a, b, r in lines if rpm_compare(a, b) != int(r)]
    assert wrong == []


@pytest.mark.skipif(shutil.which("rpm") is None, reason="rpm is not installed")
@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.from_regex(r"\A([0-2]:)?[0-9a-b][0-9ab.~^_+]{0,5}(-[0-9a-b][0-9ab.~^_+]{0,4})?\Z"),
                          st.from_regex(r"\A([0-2]:)?[0-9a-b][0-9ab.~^_+]{0,5}(-[0-9a-b][0-9ab.~^_+]{0,4})?\Z")),
                min_size=1, max_size=40))
def test_rpm_compare_is_live_rpm_vercmp(pairs: list[tuple[str, str]]) -> None:
    """Our rpm order is the installed rpm's (one `rpm --eval` per batch of pairs)."""
    lua = " ".join(f'print(rpm.vercmp("{a}","{b}") .. " ")' for a, b in pairs)
    out = subprocess.run(["rpm", "--eval", "%{lua: " + lua + "}"], capture_output=True, text=True,
                         check=True).stdout.split()
    assert [rpm_compare(a, b) for a, b in pairs] == [int(r) for r in out]


def test_globs_and_resolve() -> None:
    """A glob resolves to the newest matching candidate in the backend's order; an exact rpm version without a
    release names every release."""
    offered = ["570.86.9-1", "570.86.15-1", "570.124.06-1", "550.127.05-1"]
    assert resolve("apt", "570.86.*", offered) == "570.86.15-1"  # 15 > 9 numerically, not as text
    assert resolve("apt", "575.*", offered) is None
    assert resolve("dnf", "570.86.15", offered) == "570.86.15-1"
    assert resolve("apt", "570.86.15", offered) is None  # Debian: no revision is revision "", not any
    assert highest("apt", ["1.0~rc1", "1.0", "0.9"]) == "1.0"
    assert matches("dnf", "1:2.10-3", "1:2.10-3") and not matches("dnf", "2.10-3", "1:2.10-3")


@pytest.mark.parametrize("bad", ["", "latest", "-1.0", "1.0 2", "1.0;rm", "1.[0", "x" * 200])
def test_check_spec_refuses(bad: str) -> None:
    """What is not a version or a glob is refused with the reason."""
    with pytest.raises(ValueError):
        check_spec(bad)
