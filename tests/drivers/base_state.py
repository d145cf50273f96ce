"""A small desired state for the driver tests: controller ctl (systemd), gpu01-02 (Slurm compute) and
cpu01 (supervisord, not in Slurm)."""

from __future__ import annotations

from pathlib import Path

CLUSTER = """\
cluster:
  name: t
  slurm_version: "23.11"
  controllers: [ctl]
  slurm_conf: {GresTypes: gpu}
  node_sets:
    - {nodes: "gpu[01-02]", CPUs: 2}
  partitions:
    - {name: debug, nodes: "gpu[01-02]", default: true}
"""

NODES = """\
nodes:
  - {name: ctl, roles: [controller, login]}
  - {name: "gpu[01-02]", roles: [compute]}
  - {name: cpu01, service_manager: {type: supervisord}}
"""


def write_state(root: Path, extra: str, repo_files: dict[str, str] | None = None) -> Path:
    """The base state plus EXTRA (files.yaml) and REPO_FILES (relative path -> text) under ROOT."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cluster.yaml").write_text(CLUSTER)
    (root / "nodes.yaml").write_text(NODES)
    (root / "files.yaml").write_text(extra)
    for rel, text in (repo_files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root
