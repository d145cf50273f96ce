"""slurm.conf parameters by name in the YAML: any documented key, did-you-mean, and the cluster's release."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from reconciler.desired.loader import DesiredStateError, load_dir
from reconciler.render.files import render_file

EXAMPLE = Path(__file__).resolve().parents[2] / "desired-state"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLE, tmp_path / "ds")
    return tmp_path / "ds"


def plant(state_dir: Path, new: str, version: str | None = None) -> int:
    """Add a line under slurm_conf (and set the version); return the added line's number."""
    cluster = state_dir / "cluster.yaml"
    text = cluster.read_text()
    if version:
        text = re.sub(r'slurm_version: "[0-9.]+"', f'slurm_version: "{version}"', text)
    anchor = "    MpiDefault: pmix\n"
    text = text.replace(anchor, anchor + new)
    cluster.write_text(text)
    return text.splitlines().index(new.rstrip("\n")) + 1


def test_message_timeout_directly_under_slurm_conf_renders(state_dir: Path) -> None:
    plant(state_dir, "    MessageTimeout: 25\n")
    text = render_file(load_dir(state_dir).state, "login01", "slurm.conf", "t")
    assert "\nMessageTimeout=25\n" in text


def test_any_case_is_slurms_spelling(state_dir: Path) -> None:
    plant(state_dir, "    messagetimeout: 25\n")
    assert "\nMessageTimeout=25\n" in render_file(load_dir(state_dir).state, "login01", "slurm.conf", "t")


def test_misspelled_key_names_file_line_column_and_a_suggestion(state_dir: Path) -> None:
    line = plant(state_dir, "    MesageTimeout: 25\n")
    with pytest.raises(DesiredStateError) as caught:
        load_dir(state_dir)
    [error] = caught.value.errors
    assert str(error).startswith(f"cluster.yaml:{line}:5: cluster.slurm_conf.MesageTimeout: ")
    assert "did you mean MessageTimeout" in str(error)


def test_key_newer_than_the_cluster_release_names_the_first_release(state_dir: Path) -> None:
    line = plant(state_dir, "    MaxBatchRequeue: 3\n", version="22.05")
    with pytest.raises(DesiredStateError) as caught:
        load_dir(state_dir)
    [error] = caught.value.errors
    assert str(error).startswith(f"cluster.yaml:{line}:5: cluster.slurm_conf.MaxBatchRequeue: ")
    assert "first in 23.02" in str(error)


def test_wrong_type_is_refused_at_the_key(state_dir: Path) -> None:
    line = plant(state_dir, "    MessageTimeout: soon\n")
    with pytest.raises(DesiredStateError) as caught:
        load_dir(state_dir)
    [error] = caught.value.errors
    assert str(error).startswith(f"cluster.yaml:{line}:5: cluster.slurm_conf.MessageTimeout: ")


def test_known_key_under_extra_is_refused(state_dir: Path) -> None:
    plant(state_dir, "    extra: {MessageTimeout: 25}\n")
    with pytest.raises(DesiredStateError, match="set it directly"):
        load_dir(state_dir)


def test_site_plugin_key_under_extra_renders(state_dir: Path) -> None:
    plant(state_dir, "    extra: {SiteFooPluginParam: bar}\n")
    assert "\nSiteFooPluginParam=bar\n" in render_file(load_dir(state_dir).state, "login01", "slurm.conf", "t")


def test_unset_parameters_are_not_rendered(tmp_path: Path) -> None:
    """Nothing the YAML does not set appears in slurm.conf (no defaults of the model)."""
    (tmp_path / "c.yaml").write_text(
        'cluster: {name: c, slurm_version: "23.11", controllers: [ctl], '
        'node_sets: [{nodes: "n[1-2]"}], partitions: [{name: p, nodes: "n[1-2]"}]}\n'
        'nodes: [{name: ctl, roles: [controller]}, {name: "n[1-2]", roles: [compute]}]\n')
    text = render_file(load_dir(tmp_path).state, "ctl", "slurm.conf", "t")
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body == ["ClusterName=c", "SlurmctldHost=ctl", "NodeName=n[1-2]", "PartitionName=p Nodes=n[1-2]"]


def test_gpus_without_gres_types_is_an_error_not_a_silent_addition(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        'cluster: {name: c, slurm_version: "23.11", controllers: [ctl], '
        'node_sets: [{nodes: "n[1-2]", gpus: {count: 8}}], partitions: [{name: p, nodes: "n[1-2]"}]}\n'
        'nodes: [{name: ctl, roles: [controller]}, {name: "n[1-2]", roles: [compute]}]\n')
    with pytest.raises(DesiredStateError, match="GresTypes"):
        load_dir(tmp_path)


def test_auth_none_is_a_risk_warning_at_its_key(state_dir: Path) -> None:
    from reconciler.desired.risks import risk_warnings

    cluster = state_dir / "cluster.yaml"
    text = cluster.read_text().replace("    AuthType: auth/munge\n", "    AuthType: auth/none\n")
    cluster.write_text(text)
    line = text.splitlines().index("    AuthType: auth/none") + 1
    warnings = [str(w) for w in risk_warnings(load_dir(state_dir))]
    assert any(w.startswith(f"cluster.yaml:{line}:5: cluster.slurm_conf.AuthType: ") and "auth/none" in w
               for w in warnings), warnings
