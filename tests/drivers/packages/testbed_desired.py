"""The desired state the package testbed tests start from: the testbed's own, with gpu03 a dnf node."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.testbed_fixture import Testbed

DNF_NODE = "gpu03"


def with_dnf_node(bed: Testbed, target: Path) -> Path:
    """Copy BED's desired state to TARGET with gpu[01-02] on apt and DNF_NODE declared `package_manager: dnf`."""
    shutil.copytree(bed.desired_state, target)
    nodes = target / "nodes.yaml"
    text = nodes.read_text()
    old = '  - name: "gpu[01-03]"\n    roles: [compute]\n'
    assert old in text, text
    nodes.write_text(text.replace(old, '  - name: "gpu[01-02]"\n    roles: [compute]\n'
                                       f'  - name: {DNF_NODE}\n    roles: [compute]\n    package_manager: dnf\n'))
    return target
