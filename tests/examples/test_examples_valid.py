"""The reference examples (desired-state/examples/) validate, render and are linked from the README."""

from __future__ import annotations

import pytest

from reconciler.desired.loader import load_dir
from reconciler.desired.risks import risk_warnings
from reconciler.render import managed_files_for, render_file
from tests.examples.variant import EXAMPLES, REPO, VARIANTS

NAMES = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())


def test_there_is_one_example_per_reference_cluster_and_each_has_a_variant() -> None:
    assert NAMES == ["a3-mega-lustre", "cloud-supervisord", "deepops-perf", "dgx-pod-bastion"]
    assert sorted(VARIANTS) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_example_validates_and_renders_every_file(name: str) -> None:
    loaded = load_dir(EXAMPLES / name)
    rendered = 0
    for node in ("ctl", *[n.name for n in loaded.state.nodes]):
        try:
            files = managed_files_for(loaded.state, node)
        except Exception:  # noqa: BLE001 - a hostlist entry is not itself a node name
            continue
        for file_name in files:
            assert render_file(loaded.state, node, file_name, "example").strip()
            rendered += 1
    assert rendered


def test_parent_desired_state_does_not_take_in_the_examples() -> None:
    parent = load_dir(REPO / "desired-state")
    assert parent.state.cluster.name == "dgx-pod" and len(parent.files) == 7


def test_readme_links_every_example() -> None:
    readme = (REPO / "README.md").read_text()
    for name in NAMES:
        assert f"desired-state/examples/{name}" in readme


def test_cloud_example_warns_about_its_wide_no_root_squash_export() -> None:
    warnings = [str(w) for w in risk_warnings(load_dir(EXAMPLES / "cloud-supervisord"))]
    assert any("no_root_squash" in w and "100.64.0.0/10" in w for w in warnings)
