"""Hostlist products are bounded before expanding (issue 22), per expression and per desired state.

Generated expressions of random shape (items, bracket groups, ranges, lists inside groups): the size computed
without expanding equals the expansion's length when it is within the bound; over the bound, expand refuses at
once (no expansion is built). A desired state whose distinct hostlists add up past the state bound is refused
with file:line. No refusal builds a single name first.
"""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.common import hostlist
from reconciler.desired.loader import DesiredStateError, load_dir
from tests.engine.testbed_state import write_state

RANGE = st.tuples(st.integers(0, 40), st.integers(0, 40)).map(lambda r: (min(r), max(r)))
TERM = RANGE.map(lambda r: f"{r[0]}" if r[0] == r[1] else f"{r[0]}-{r[1]}")
GROUP = st.lists(TERM, min_size=1, max_size=3).map(lambda terms: "[" + ",".join(terms) + "]")
PREFIX = st.text(st.sampled_from(list("abcn-_")), min_size=1, max_size=3)
ITEM = st.lists(st.tuples(PREFIX, GROUP), min_size=0, max_size=4).flatmap(
    lambda parts: PREFIX.map(lambda head: head + "".join(p + g for p, g in parts)))
EXPRESSION = st.lists(ITEM, min_size=1, max_size=4).map(",".join)
HUGE_GROUP = st.integers(10, 10**9).map(lambda n: f"[1-{n}]")


@given(EXPRESSION)
def test_count_equals_expansion_length(expr: str) -> None:
    """Within the bound, the size computed from the ranges is the number of names expand returns."""
    size = hostlist.count(expr)
    if size <= hostlist.MAX_EXPRESSION:
        assert len(hostlist.expand(expr)) == size
    else:
        with pytest.raises(hostlist.HostlistError, match="refused before expanding"):
            hostlist.expand(expr)


@given(st.lists(HUGE_GROUP, min_size=2, max_size=12), st.integers(1, 200))
def test_products_over_the_bound_are_refused_at_once(groups: list[str], items: int) -> None:
    """Several bracket groups (a product up to 10^108 names), repeated in many items: refused before expanding."""
    expr = ",".join(f"n{i}" + "x".join(groups) for i in range(items))
    if hostlist.count(expr) <= hostlist.MAX_EXPRESSION:
        return
    # "At once" means before any name is built: expanding an item is made to fail, so reaching it would show.
    with patch.object(hostlist, "_expand_item", side_effect=AssertionError("expanded before refusing")):
        with pytest.raises(hostlist.HostlistError, match=f"more than {hostlist.MAX_EXPRESSION} names"):
            hostlist.expand(expr)
        with pytest.raises(hostlist.HostlistError, match="refused before expanding"):
            hostlist.expand_set(expr)


def test_budget_counts_distinct_expressions_once() -> None:
    """Inside a budget, distinct expressions add up; the same expression again costs nothing."""
    with hostlist.budget(100):
        hostlist.expand("a[1-60]")
        hostlist.expand("a[1-60]")
        with pytest.raises(hostlist.HostlistError, match="more than 100 names in all"):
            hostlist.expand("b[1-60]")
    assert len(hostlist.expand("b[1-60]")) == 60  # outside the budget, only the per-expression bound holds


def _state(tmp_path: Path) -> Path:
    return write_state(tmp_path / "desired", name="bounds", state_dir=tmp_path, subnet="10.99.0",
                       computes="gpu[01-02]")


def test_many_expressions_in_one_state_are_refused_with_file_line(tmp_path: Path) -> None:
    """Hundreds of patches, each on a different 60,000-name hostlist: the state bound refuses them, file:line."""
    desired = _state(tmp_path)
    patches = "".join(f"  - name: p{i}\n    path: /etc/p{i}\n    nodes: n{i}x[1-60000]\n    content: x\n"
                      for i in range(300))
    (desired / "zz-many.yaml").write_text("patches:\n" + patches)
    built: list[int] = []
    real = hostlist._expand_item

    def counted(item: str, expr: str) -> list[str]:
        names = real(item, expr)
        built.append(len(names))
        return names

    hostlist.clear_cache()
    with patch.object(hostlist, "_expand_item", side_effect=counted), pytest.raises(DesiredStateError) as caught:
        load_dir(desired)
    assert sum(built) <= hostlist.MAX_TOTAL  # the refused ones were never built: only what fits the budget was
    bound = [e for e in caught.value.errors if "names in all" in e.message]
    assert bound and all(e.location is not None and e.location.file == "zz-many.yaml" for e in bound)
    assert bound[0].key_path().startswith("patches[")


def test_one_product_in_a_state_is_refused_with_file_line(tmp_path: Path) -> None:
    """An inventory entry whose name is a product of bracket groups: refused at its line before expanding."""
    desired = _state(tmp_path)
    (desired / "zz-product.yaml").write_text("nodes:\n  - name: r[1-1000]n[1-1000]g[1-1000]\n")
    with pytest.raises(DesiredStateError) as caught:
        load_dir(desired)
    hits = [e for e in caught.value.errors if "refused before expanding" in e.message]
    assert hits and str(hits[0].location).startswith("zz-product.yaml:2:")
